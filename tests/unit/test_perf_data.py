"""``servinglib perf-data``: perf_analyzer input data the model accepts, from its self-tests.

perf_analyzer's own random inputs break the digits model's bounds (pixels 0 to 16) and end
the documented run with exit 99; what ``perf-data`` writes is sent here as perf_analyzer
sends it (``-b 4``: four entries stacked on a batch dimension) and must be answered.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from servinglib.serve.app import create_app_from_config
from tests.conftest import run_cli

EXAMPLES = Path(__file__).parents[2] / "examples"


def _digits_service(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLES / "digits-classifier" / "models", tmp_path / "models")
    entry = next(
        m
        for m in yaml.safe_load((EXAMPLES / "servinglib.yaml").read_text())["models"]
        if m["name"] == "digits"
    )
    entry["repository"] = "models/digits"
    entry["default_version"] = "1"  # FP32; the perf data are the same cases for version 2
    config = tmp_path / "servinglib.yaml"
    config.write_text(yaml.safe_dump({"service": "perf", "models": [entry]}))
    return config


def test_perf_data_is_answered_as_perf_analyzer_sends_it(tmp_path: Path) -> None:
    config = _digits_service(tmp_path)
    out = tmp_path / "digits.json"
    done = run_cli("perf-data", "--config", str(config), "--model", "digits", "--out", str(out))
    assert done.returncode == 0, done.stderr
    entries = json.loads(out.read_text())["data"]
    cases = json.loads((tmp_path / "models/digits/1/test_data.json").read_text())["cases"]
    assert len(entries) == sum(len(case["input"]["pixels"]) for case in cases)
    assert all(entry["pixels"]["shape"] == [64] for entry in entries)
    client = create_app_from_config(config).test_client()
    for start in range(0, len(entries), 4):
        batch = entries[start : start + 4]
        tensor = {
            "name": "pixels",
            "datatype": "FP32",
            "shape": [len(batch), 64],
            "data": [value for entry in batch for value in entry["pixels"]["content"]],
        }
        answer = client.post("/v2/models/digits/infer", json={"inputs": [tensor]})
        assert answer.status_code == 200, answer.get_json()


def test_a_version_without_cases_points_to_input_data_zero(tmp_path: Path) -> None:
    config = _digits_service(tmp_path)
    (tmp_path / "models/digits/1/test_data.json").unlink()
    done = run_cli("perf-data", "--config", str(config), "--model", "digits")
    assert done.returncode == 2
    assert "has no cases in" in done.stderr
    assert "--input-data zero" in done.stderr
