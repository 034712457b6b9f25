"""``servinglib init``: write the README's "model in one file" into a directory, ready to run.

The files are the README's, byte for byte (a test compares them), so the README's commands
work as printed right after ``servinglib init``::

    servinglib init && servinglib validate && servinglib selftest && servinglib serve
"""

from __future__ import annotations

from pathlib import Path

from servinglib.errors import ServinglibError

__all__ = ["STARTER_FILES", "write_starter"]

MODEL_PY = """\
# models/eta/model.py
import json
from pathlib import Path
from typing import Any

import servinglib


class EtaModel(servinglib.Model):
    def load(self, path: Path) -> None:  # path = this version's directory
        self.weights = json.loads((path / "weights.json").read_text())

    def predict(self, features: dict[str, Any]) -> dict[str, Any]:  # one request
        w = self.weights
        return {"eta_s": w["base_s"] + w["s_per_km"] * features["distance_km"]}
"""

SERVINGLIB_YAML = """\
# servinglib.yaml
service: eta-service
models:
  - name: eta
    class: models.eta.model:EtaModel
    repository: models/eta          # holds 1/, 2/, ... each with its artifact + test_data.json
    default_version: "1"            # explicit: adding a version never moves it
    input_schema:                   # checked before predict(): a bad request gets a 400
      type: object
      required: [distance_km]
      additionalProperties: false
      properties:
        distance_km: {type: number, minimum: 0}
"""

WEIGHTS_JSON = """\
{"base_s": 120.0, "s_per_km": 96.0}
"""

TEST_DATA_JSON = """\
{"cases": [{"name": "short trip", "input": {"distance_km": 2.0},
            "expected": {"eta_s": 312.0}, "tolerance": {"rtol": 0.01}}]}
"""

STARTER_FILES: dict[str, str] = {
    "models/eta/model.py": MODEL_PY,
    "servinglib.yaml": SERVINGLIB_YAML,
    "models/eta/1/weights.json": WEIGHTS_JSON,
    "models/eta/1/test_data.json": TEST_DATA_JSON,
}


def write_starter(directory: Path, *, force: bool = False) -> list[Path]:
    """Write the one-file model, its config, weights and self-test into ``directory``.

    Returns:
        The files written.

    Raises:
        ServinglibError: a file exists already and ``force`` is false (nothing written).
    """
    targets = {directory / name: text for name, text in STARTER_FILES.items()}
    existing = [path for path in targets if path.exists()]
    if existing and not force:
        names = ", ".join(str(path) for path in existing)
        raise ServinglibError(
            f"servinglib init would overwrite {names}; run it in an empty directory, or pass "
            "--force to replace them"
        )
    for path, text in targets.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(targets)
