"""``servinglib optimize export`` of sklearn / XGBoost / LightGBM versions to ONNX.

Small models are fitted here; the exported graph is run by ONNX Runtime and compared with
the framework's own predictions on every row of the data set (not only the rows the export
checked), and the refusals are checked to leave nothing behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servinglib.cli.main import main
from tests.tabular_models import (
    cancer_frame,
    diabetes_frame,
    write_lightgbm,
    write_sklearn_categorical,
    write_sklearn_pipeline,
    write_xgboost,
)

pytest.importorskip("skl2onnx")
pytest.importorskip("onnxmltools")
ort = pytest.importorskip("onnxruntime")

QUICK = ["--warmup", "2", "--iterations", "10", "--repeats", "1", "--min-round-s", "0.01"]
QUICK += ["--batch-size", "8"]
DIABETES = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]


def _export(version: Path, out: Path, *extra: str) -> int:
    return main(["optimize", "export", str(version), "--out", str(out), *QUICK, *extra])


def _run(path: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feed), strict=True))


@pytest.mark.parametrize(
    ("runtime", "write", "frame", "dtype"),
    [
        ("sklearn", write_sklearn_pipeline, cancer_frame, np.float64),
        ("xgboost", write_xgboost, diabetes_frame, np.float32),
        ("lightgbm", write_lightgbm, cancer_frame, np.float32),
    ],
)
def test_export_matches_the_library_and_says_which_path_is_faster(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    runtime: str,
    write: Any,
    frame: Any,
    dtype: Any,
) -> None:
    fitted = write(tmp_path / "models/m/1")
    out = tmp_path / "models/m-onnx/1/model.onnx"
    assert _export(tmp_path / "models/m/1", out) == 0
    printed = capsys.readouterr().out
    assert f"verified against runtime: {runtime}" in printed
    worst = float(printed.split(f"max |ONNX Runtime - {runtime}| = ")[1].split()[0])
    assert worst < 1e-3
    assert "p50 batch 1 (ms)" in printed
    assert "rows/s at batch 8" in printed
    faster = printed.split("faster for this model: ")[1].split()[0]
    assert faster in ("onnx", "native")

    rows, _ = frame()
    got = _run(out, {"input": rows.to_numpy(dtype)})
    expected = fitted.predict(rows if runtime != "lightgbm" else _lgb_names(rows))
    if hasattr(fitted, "predict_proba"):
        proba = fitted.predict_proba(rows if runtime != "lightgbm" else _lgb_names(rows))
        np.testing.assert_array_equal(got["predict"], expected)
        np.testing.assert_allclose(got["predict_proba"], proba, atol=1e-5)
        assert got["predict_proba"].shape == (len(rows), 2)
    else:
        np.testing.assert_allclose(got["predict"], expected, rtol=1e-4)
        assert got["predict"].shape == (len(rows),)
    cases = json.loads((out.parent / "test_data.json").read_text())["cases"]
    assert cases
    assert set(cases[0]["input"]) == {"input"}


def _lgb_names(rows: Any) -> Any:
    return rows.rename(columns=lambda c: c.replace(" ", "_"))


def test_export_beyond_the_tolerance_is_refused_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_xgboost(tmp_path / "models/m/1")
    out = tmp_path / "onnx/1/model.onnx"
    # XGBoost sums in float32 in a different order than ONNX Runtime: never bit-exact
    assert _export(tmp_path / "models/m/1", out, "--atol", "0", "--rtol", "0") == 2
    error = capsys.readouterr().err
    assert "output 'predict' of the ONNX model differs from runtime: xgboost by up to" in error
    assert "the export is refused" in error
    assert "--atol/--rtol" in error
    assert not (tmp_path / "onnx").exists()


def test_categorical_pipeline_exports_one_input_per_feature_from_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fitted = write_sklearn_categorical(tmp_path / "models/diabetes/1")
    inputs = ", ".join(
        f"{{name: {n}, datatype: {'BYTES' if n == 'sex' else 'FP64'}, shape: [-1]}}"
        for n in DIABETES
    )
    (tmp_path / "servinglib.yaml").write_text(
        "service: t\nmodels:\n  - name: diabetes\n    runtime: sklearn\n"
        f"    repository: models/diabetes\n    default_version: '1'\n    inputs: [{inputs}]\n"
    )
    rows, _ = diabetes_frame(categorical=True)
    np.savez(
        tmp_path / "rows.npz",
        **{n: rows[n].to_numpy() for n in DIABETES if n != "sex"},
        sex=rows["sex"].to_numpy().astype(str),
    )
    out = tmp_path / "onnx/1/model.onnx"
    code = _export(
        tmp_path / "models/diabetes/1",
        out,
        "--config",
        str(tmp_path / "servinglib.yaml"),
        "--sample",
        str(tmp_path / "rows.npz"),
    )
    assert code == 0, capsys.readouterr().err
    assert f"sample: {len(rows)} rows" in capsys.readouterr().out
    feed = {
        n: (rows[[n]].to_numpy().astype(str) if n == "sex" else rows[[n]].to_numpy(np.float64))
        for n in DIABETES
    }
    np.testing.assert_allclose(_run(out, feed)["predict"], fitted.predict(rows), rtol=1e-6)


def test_a_version_the_runtime_refuses_is_not_exported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    version = tmp_path / "models/m/1"
    version.mkdir(parents=True)
    (version / "model.joblib").write_bytes(b"not even a pickle")
    assert _export(version, tmp_path / "o/model.onnx", "--runtime", "sklearn") == 2
    error = capsys.readouterr().err
    assert "runtime: sklearn cannot load" in error
    assert "is pickle" in error
    assert not (tmp_path / "o").exists()
