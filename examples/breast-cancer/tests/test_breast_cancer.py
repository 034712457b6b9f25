"""Tests of the breast-cancer example: self-tests, accuracy, batching and reproducible training."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servinglib.checks import run_all_selftests
from servinglib.config.spec import load_config
from servinglib.lifecycle.registry import VersionState
from servinglib.testing import import_file

EXAMPLE = Path(__file__).resolve().parent.parent
REPOSITORY = EXAMPLE / "models" / "breast_cancer"
VERSIONS = ("1", "2")
MIN_ACCURACY = 0.93


train = import_file(EXAMPLE / "train.py")
model_module = import_file(REPOSITORY / "model.py")
BreastCancerClassifier: Any = model_module.BreastCancerClassifier


def _is_models_module(name: str) -> bool:
    return name == "models" or name.startswith("models.")


@pytest.fixture
def own_models_package(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Import this example's ``models`` package, whatever ``models`` was imported before.

    Every example (and the test fixtures) ships a top-level ``models`` package: evict those
    already imported so servinglib imports ours from this example's directory, then drop ours
    again and restore ``sys.path`` and the evicted modules.
    """
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in [name for name in sys.modules if _is_models_module(name)]:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in [name for name in sys.modules if _is_models_module(name)]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def split() -> Any:
    return train.load_split()


@pytest.fixture(scope="module", params=VERSIONS)
def version_model(request: pytest.FixtureRequest) -> Any:
    model = BreastCancerClassifier()
    model.load(REPOSITORY / request.param)
    return model


@pytest.mark.usefixtures("own_models_package")
@pytest.mark.parametrize(
    "config_path",
    [EXAMPLE / "servinglib.yaml", EXAMPLE.parent / "servinglib.yaml"],
    ids=["breast-cancer", "all-examples"],
)
def test_every_version_passes_its_self_tests(config_path: Path) -> None:
    records = [r for r in run_all_selftests(load_config(config_path)) if r.model == "breast-cancer"]
    assert sorted(r.version for r in records) == list(VERSIONS)
    for record in records:
        assert record.state is VersionState.READY, (record.version, record.reason)
        assert len(record.report.cases) == 5


def test_held_out_accuracy(split: Any, version_model: Any) -> None:
    answers = version_model.predict_batch([{"measurements": row} for row in split.x_test])
    predicted = np.array([answer["label"] == "malignant" for answer in answers])
    accuracy = float(np.mean(predicted == split.y_test))
    assert accuracy >= MIN_ACCURACY


def test_probability_is_of_malignancy(split: Any, version_model: Any) -> None:
    """scikit-learn's target 0 is malignant: malignant samples must score higher on average."""
    answers = version_model.predict_batch([{"measurements": row} for row in split.x_test])
    p = np.array([answer["probability_malignant"] for answer in answers])
    assert p[split.y_test].mean() > 0.5 > p[~split.y_test].mean()


def test_predict_batch_matches_predict(split: Any, version_model: Any) -> None:
    batch = [{"measurements": row.tolist()} for row in split.x_test]
    batched = version_model.predict_batch(batch)
    single = [version_model.predict(features) for features in batch]
    assert len(batched) == len(single)
    for b, s in zip(batched, single, strict=True):
        assert b["label"] == s["label"]
        # Same formula; only BLAS summation order may differ between a 1-row and an n-row product.
        assert b["probability_malignant"] == pytest.approx(s["probability_malignant"], rel=1e-12)
    assert version_model.predict_batch([]) == []


def test_accepts_lists_and_arrays(split: Any, version_model: Any) -> None:
    row = split.x_test[0]
    expected = version_model.predict({"measurements": row.tolist()})
    assert set(expected) == {"probability_malignant", "label"}
    assert isinstance(expected["probability_malignant"], float)
    assert expected["label"] in {"malignant", "benign"}
    # Open Inference requests hand in arrays: shape (30,) or (1, 30), FP64 or FP32.
    for measurements, rel in ((row, 1e-12), (row.reshape(1, 30), 1e-12), (row.astype("f4"), 1e-5)):
        answer = version_model.predict({"measurements": measurements})
        assert answer["label"] == expected["label"]
        assert answer["probability_malignant"] == pytest.approx(
            expected["probability_malignant"], rel=rel
        )


@pytest.mark.parametrize(
    "features",
    [
        {"measurements": [1.0] * 29},
        {"measurements": np.ones((2, 30))},
        {"measurements": [float("nan")] * 30},
        {"values": [1.0] * 30},
    ],
    ids=["29-values", "two-rows", "nan", "no-measurements"],
)
def test_rejects_malformed_input(version_model: Any, features: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="measurements"):
        version_model.predict(features)


def test_training_is_reproducible(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    request = tmp_path / "request.json"
    accuracies = train.train(tmp_path, request)
    assert all(accuracy >= MIN_ACCURACY for accuracy in accuracies.values())
    assert "held-out accuracy" in capsys.readouterr().out
    # Numerically equal, not byte-equal: another CPU or BLAS build may change the last bits.
    for version in VERSIONS:
        rebuilt_cases = json.loads((tmp_path / version / "test_data.json").read_text())["cases"]
        committed_cases = json.loads((REPOSITORY / version / "test_data.json").read_text())["cases"]
        assert [c["name"] for c in rebuilt_cases] == [c["name"] for c in committed_cases]
        for rebuilt, committed in zip(rebuilt_cases, committed_cases, strict=True):
            assert rebuilt["input"] == committed["input"]
            assert rebuilt["expected"]["label"] == committed["expected"]["label"]
            assert rebuilt["expected"]["probability_malignant"] == pytest.approx(
                committed["expected"]["probability_malignant"], rel=1e-6, abs=1e-9
            )
        with (
            np.load(tmp_path / version / "weights.npz") as new,
            np.load(REPOSITORY / version / "weights.npz") as old,
        ):
            assert set(new.files) == set(old.files)
            for key in ("mean", "scale", "coef", "intercept"):
                np.testing.assert_allclose(new[key], old[key], rtol=1e-6, atol=1e-9)
    assert json.loads(request.read_text()) == json.loads((EXAMPLE / "request.json").read_text())


@pytest.mark.usefixtures("own_models_package")
@pytest.mark.parametrize(
    "config_path",
    [EXAMPLE / "servinglib.yaml", EXAMPLE.parent / "servinglib.yaml"],
    ids=["breast-cancer", "all-examples"],
)
def test_the_ensemble_of_both_versions_passes_its_self_tests(config_path: Path) -> None:
    records = run_all_selftests(load_config(config_path))
    ensemble = next(r for r in records if r.model == "breast-cancer-ensemble")
    assert ensemble.state is VersionState.READY, ensemble.reason
    assert len(ensemble.report.cases) == 3
