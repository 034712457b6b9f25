"""Tests of the digits example: self-tests, FP32 vs INT8 accuracy, batch invariance, serving."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servinglib.checks import run_all_selftests
from servinglib.config.spec import load_config
from servinglib.lifecycle.registry import VersionState
from servinglib.optimize import QuantizeOptions, quantize_model
from servinglib.serve.app import create_app_from_config
from servinglib.testing import import_file

EXAMPLE = Path(__file__).resolve().parent.parent
REPOSITORY = EXAMPLE / "models" / "digits"
DATA = EXAMPLE / "data"

ort = pytest.importorskip("onnxruntime")


def session(path: Path) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def digits_alone(model: Any, x: np.ndarray) -> np.ndarray:
    return np.array([int(model.run(["digit"], {"pixels": row[np.newaxis]})[0][0]) for row in x])


@pytest.fixture(scope="module")
def test_split() -> tuple[np.ndarray, np.ndarray]:
    with np.load(DATA / "test.npz") as data:
        return data["pixels"], data["labels"]


def test_every_version_passes_its_self_tests() -> None:
    records = run_all_selftests(load_config(EXAMPLE / "servinglib.yaml"))
    assert sorted(r.version for r in records) == ["1", "2"]
    for record in records:
        assert record.state is VersionState.READY, (record.version, record.reason)
        assert len(record.report.cases) == 5


def test_static_int8_is_within_half_a_point_of_fp32(
    test_split: tuple[np.ndarray, np.ndarray],
) -> None:
    x, y = test_split
    fp32 = float(np.mean(digits_alone(session(REPOSITORY / "1" / "model.onnx"), x) == y))
    int8 = float(np.mean(digits_alone(session(REPOSITORY / "2" / "model.onnx"), x) == y))
    assert fp32 >= 0.95
    assert abs(fp32 - int8) <= 0.005, (fp32, int8)
    assert (REPOSITORY / "2" / "model.onnx").stat().st_size < 0.35 * (
        REPOSITORY / "1" / "model.onnx"
    ).stat().st_size


def test_an_outlier_in_the_batch_breaks_dynamic_int8_but_not_static(
    test_split: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    """One request with pixel values in the thousands shares a batch with 31 good requests."""
    x, y = test_split
    good, labels = x[:31], y[:31]
    batch = np.concatenate([good, x[31:32] * 1000.0])
    dynamic = tmp_path / "dynamic.onnx"
    quantize_model(REPOSITORY / "1" / "model.onnx", dynamic, QuantizeOptions(method="dynamic"))
    accuracy = {}
    for name, path in {"static": REPOSITORY / "2" / "model.onnx", "dynamic": dynamic}.items():
        model = session(path)
        alone = digits_alone(model, good)
        batched = model.run(["digit"], {"pixels": batch})[0][:31]
        accuracy[name] = (float(np.mean(alone == labels)), float(np.mean(batched == labels)))
        if name == "static":
            assert (batched == alone).all()
    assert accuracy["static"][0] == accuracy["static"][1] >= 0.95
    assert accuracy["dynamic"][0] >= 0.95
    assert accuracy["dynamic"][1] < 0.5, accuracy


def test_served_with_batching(test_split: tuple[np.ndarray, np.ndarray]) -> None:
    client = create_app_from_config(EXAMPLE / "servinglib.yaml").test_client()
    request = json.loads((EXAMPLE / "request.json").read_text())
    response = client.post("/infer", json=request)
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert body["version"] == "2"
    x, y = test_split
    assert request["features"]["pixels"] == [x[0].tolist()]
    assert body["output"]["digit"] == [int(y[0])]
    bad = client.post("/infer", json={"model_id": "digits", "features": {"pixels": [[1.0] * 63]}})
    assert bad.status_code == 400


@pytest.mark.filterwarnings(
    "ignore:You are using the legacy TorchScript-based ONNX export:DeprecationWarning"
)
@pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning")
def test_training_is_reproducible(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    train = import_file(EXAMPLE / "train.py")
    request = tmp_path / "request.json"
    accuracy = train.train(tmp_path / "models", tmp_path / "data", request=request)
    assert accuracy["test"] >= 0.95
    assert "static INT8" in capsys.readouterr().out
    # Numerically equal, not byte-equal: another CPU or BLAS build may change the last bits.
    for version in ("1", "2"):
        rebuilt = json.loads((tmp_path / "models" / version / "test_data.json").read_text())
        committed = json.loads((REPOSITORY / version / "test_data.json").read_text())
        assert [c["name"] for c in rebuilt["cases"]] == [c["name"] for c in committed["cases"]]
        for new, old in zip(rebuilt["cases"], committed["cases"], strict=True):
            assert new["expected"]["digit"] == old["expected"]["digit"]
            np.testing.assert_allclose(
                new["expected"]["logits"], old["expected"]["logits"], atol=0.5
            )
    with np.load(tmp_path / "data" / "test.npz") as new, np.load(DATA / "test.npz") as old:
        np.testing.assert_array_equal(new["labels"], old["labels"])
    assert json.loads(request.read_text()) == json.loads((EXAMPLE / "request.json").read_text())
