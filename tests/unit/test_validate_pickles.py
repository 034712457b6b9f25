"""``servinglib validate`` reports the pickles the server would refuse to load."""

from __future__ import annotations

import pickle
from pathlib import Path

from servinglib.checks import validate_service

MODEL = """\
import servinglib


class Echo(servinglib.Model):
    def load(self, path):
        pass

    def predict(self, features):
        return features
"""


def _service(root: Path, allow_pickle: bool) -> Path:
    (root / "model.py").write_text(MODEL)
    version = root / "models" / "echo" / "1"
    version.mkdir(parents=True)
    (version / "weights.bin").write_bytes(pickle.dumps({"w": 1.0}))  # pickle under any name
    config = root / "servinglib.yaml"
    config.write_text(
        "service: s\nmodels:\n  - name: echo\n    class: model.py:Echo\n"
        "    repository: models/echo\n    default_version: '1'\n"
        f"    require_self_tests: false\n    allow_pickle: {str(allow_pickle).lower()}\n"
    )
    return config


def test_a_pickle_without_allow_pickle_is_reported(tmp_path: Path) -> None:
    _, problems = validate_service(_service(tmp_path, allow_pickle=False))
    assert len(problems) == 1
    assert "version '1': weights.bin is pickle data, which runs code when loaded" in problems[0]
    assert "allow_pickle: true" in problems[0]


def test_allowed_pickles_are_not_reported(tmp_path: Path) -> None:
    _, problems = validate_service(_service(tmp_path, allow_pickle=True))
    assert problems == []
