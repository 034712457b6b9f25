"""Pieces of ``servinglib bench`` that need no server: bodies, grids, the choice, ratios."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from servinglib.bench._compare import compare_runs
from servinglib.bench._payloads import build_requests
from servinglib.bench._sweep import _apply, best_under_budget, parse_grid, snippet
from servinglib.errors import ConfigError


def test_v2_binary_body_holds_the_raw_tensor_after_its_json_header() -> None:
    (request,) = build_requests("m", "2", [{"x": [[1.0, 2.0]]}], "v2-binary", {"x": "FP32"})
    assert request.path == "/v2/models/m/versions/2/infer"
    size = int(request.headers["Inference-Header-Content-Length"])
    header = json.loads(request.body[:size])
    assert header["inputs"][0] == {
        "name": "x",
        "shape": [1, 2],
        "datatype": "FP32",
        "parameters": {"binary_data_size": 8},
    }
    assert np.frombuffer(request.body[size:], dtype="<f4").tolist() == [1.0, 2.0]


def test_infer_and_v2_json_bodies() -> None:
    (infer,) = build_requests("m", None, [{"x": 1}], "infer", {})
    assert json.loads(infer.body) == {"model_id": "m", "features": {"x": 1}}
    (v2,) = build_requests("m", None, [{"t": "hello"}], "v2", {"t": "BYTES"})
    assert json.loads(v2.body)["inputs"][0] == {
        "name": "t",
        "shape": [1],
        "datatype": "BYTES",
        "data": ["hello"],
    }


def test_grid_parsing_names_the_settings_it_accepts() -> None:
    assert parse_grid(["max_batch_size=1,8", "workers=2"]) == {
        "max_batch_size": [1, 8],
        "workers": [2],
    }
    with pytest.raises(ConfigError, match="NAME one of"):
        parse_grid(["batch=1"])
    with pytest.raises(ConfigError, match="integers"):
        parse_grid(["instances=a"])


def test_best_under_budget_skips_points_over_it_or_with_errors() -> None:
    points = [
        {"settings": {"a": 1}, "throughput_rps": 900.0, "p95_ms": 80.0, "errors": {}},
        {"settings": {"a": 2}, "throughput_rps": 700.0, "p95_ms": 40.0, "errors": {}},
        {"settings": {"a": 3}, "throughput_rps": 800.0, "p95_ms": 30.0, "errors": {"503": 2}},
        {"settings": {"a": 4}, "throughput_rps": 500.0, "p95_ms": 10.0, "errors": {}},
    ]
    assert best_under_budget(points, 50.0)["settings"] == {"a": 2}  # type: ignore[index]
    assert best_under_budget(points, 5.0) is None


def test_settings_go_into_the_model_entry_and_the_snippet() -> None:
    config = {"models": [{"name": "m", "runtime": "onnx"}]}
    point = {"max_batch_size": 8, "max_queue_delay_us": 500, "instances": 2, "intra_op_threads": 1}
    entry = _apply(config, "m", point)["models"][0]
    assert entry["batching"] == {"max_batch_size": 8, "max_queue_delay_us": 500}
    assert entry["instances"] == 2
    assert entry["runtime_options"] == {"intra_op_threads": 1}
    assert config == {"models": [{"name": "m", "runtime": "onnx"}]}  # the original is kept
    text = yaml.safe_load(snippet("m", {**point, "workers": 2}))
    assert text["server"] == {"workers": 2}
    assert text["models"][0]["batching"] == {"max_batch_size": 8, "max_queue_delay_us": 500}


def _run(label: str, throughput: float, p95: float) -> dict[str, object]:
    median = {"throughput_rps": throughput, "p50_ms": 1.0, "p95_ms": p95, "p99_ms": 9.0}
    return {
        "label": label,
        "created": "now",
        "mode": "concurrency",
        "levels": [{"level": 4, "median": median}],
    }


def test_compare_prints_new_over_base() -> None:
    text = compare_runs(_run("a", 100.0, 10.0), _run("b", 150.0, 5.0))
    row = next(line for line in text.splitlines() if line.strip().startswith("4 |"))
    assert "100.00   150.00    1.500" in row
    assert "10.00     5.00    0.500" in row
    assert "nothing to compare" in compare_runs(
        _run("a", 1, 1), {**_run("b", 1, 1), "mode": "rate"}
    )
