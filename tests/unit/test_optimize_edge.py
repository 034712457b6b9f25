"""servinglib optimize edge: ORT format, parity with ONNX, emulated profile, the bundle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from servinglib.cli.main import main
from servinglib.optimize._session import open_session

ort = pytest.importorskip("onnxruntime")

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits-classifier"
FP32, INT8 = (DIGITS / "models" / "digits" / v / "model.onnx" for v in ("1", "2"))
VALIDATION = DIGITS / "data" / "validation.npz"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_digits_bundle_fits_rpi5_and_its_script_reports_size_and_p50(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "edge"
    code = main(
        [
            "optimize",
            "edge",
            str(FP32),
            "--profile",
            "rpi5",
            "--validation",
            str(VALIDATION),
            "--iterations",
            "100",
            "--out",
            str(bundle),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "p50 x 3" in printed
    assert "1 CPU" in printed
    for name in ("model.ort", "required_operators.config", "infer.py", "sample.npz"):
        assert (bundle / name).is_file(), name
    assert "onnxruntime" in (bundle / "requirements.txt").read_text()
    ops = (bundle / "required_operators.config").read_text()
    assert "ai.onnx;" in ops
    assert "Conv" in ops
    assert "Gemm" in ops
    # the .ort answers as the .onnx does on every validation sample
    report = json.loads((bundle / "edge-report.json").read_text())
    (candidate,) = report["candidates"]
    assert candidate["max_abs_diff"] <= 1e-4
    with np.load(VALIDATION) as archive:
        pixels = archive["pixels"]
    onnx_logits = open_session(FP32).raw.run(None, {"pixels": pixels})[0]
    ort_logits = open_session(bundle / "model.ort").raw.run(None, {"pixels": pixels})[0]
    assert float(np.max(np.abs(onnx_logits - ort_logits))) == pytest.approx(
        candidate["max_abs_diff"], abs=1e-6
    )
    # the servable copy is the same model (runtime: onnx serves models/model/1/model.onnx)
    assert (bundle / "models/model/1/model.onnx").read_bytes() == FP32.read_bytes()
    assert "runtime: onnx" in (bundle / "servinglib.yaml").read_text()
    # the bundle's own script, pinned to one CPU as the profile emulates, in the profile
    cpu = min(os.sched_getaffinity(0))
    done = subprocess.run(
        [sys.executable, str(bundle / "infer.py"), "--iterations", "100"],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )
    figures = json.loads(done.stdout)
    assert figures["cpus"] == [cpu]
    assert figures["threads"] == 1
    assert figures["size_mb"] <= 5.0
    assert figures["p50_ms"] * 3.0 <= 15.0


def test_unmeetable_profile_fails_listing_every_candidate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "never"
    code = main(
        [
            "optimize",
            "edge",
            str(FP32),
            str(INT8),
            "--max-size-mb",
            "0.01",
            "--validation",
            str(VALIDATION),
            "--iterations",
            "20",
            "--out",
            str(bundle),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert not bundle.exists()
    assert "no candidate fits the rpi5 profile" in err
    assert "1/model.onnx: 0.16" in err
    assert "2/model.onnx: 0.05" in err
    assert err.count("> 0.01 MB") == 2


def test_out_holding_other_files_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    code = main(
        ["optimize", "edge", str(FP32), "--validation", str(VALIDATION), "--out", str(tmp_path)]
    )
    assert code == 2
    assert "holds files that are not an edge bundle" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_run_target_edge_quantizes_then_bundles_the_smallest_within_the_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "int8" / "model.onnx"
    code = main(
        [
            "optimize",
            "run",
            str(FP32),
            "--method",
            "static",
            "--reduce-range",
            "--calibration",
            str(DIGITS / "data" / "calibration.npz"),
            "--validation",
            str(VALIDATION),
            "--metric",
            "accuracy",
            "--output",
            "logits",
            "--repeats",
            "3",
            "--iterations",
            "30",
            "--out",
            str(out),
            "--target",
            "edge",
            "--profile",
            "rpi4",
            "--no-progress",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert out.is_file()  # the run's INT8 model, as without --target
    assert "profile rpi4" in printed
    bundle = tmp_path / "int8" / "edge"  # default: beside --out
    report = json.loads((bundle / "edge-report.json").read_text())
    assert report["profile"]["name"] == "rpi4"
    sources = [Path(c["source"]) for c in report["candidates"]]
    assert sources == [FP32, out]  # the FP32 source and the INT8 model, both checked
    fp32, int8 = report["candidates"]
    assert int8["size_mb"] < fp32["size_mb"]
    assert report["chosen"] == str(out)  # the smaller
    assert (bundle / "model.ort").stat().st_size == pytest.approx(int8["size_mb"] * 1e6, rel=1e-3)
    assert all(c["max_abs_diff"] <= 1e-4 for c in report["candidates"])
    assert int8["scaled_p50_ms"] <= report["profile"]["max_p50_ms"]
    # the bundled .ort is the INT8 model: it answers as the run's model.onnx does
    with np.load(VALIDATION) as archive:
        pixels = archive["pixels"]
    want = open_session(out).raw.run(None, {"pixels": pixels})[0]
    got = open_session(bundle / "model.ort").raw.run(None, {"pixels": pixels})[0]
    assert float(np.max(np.abs(want - got))) <= 1e-4


def test_edge_flags_without_the_edge_target_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "model.onnx"
    flags = ["--validation", str(VALIDATION), "--profile", "rpi4", "--out", str(out)]
    code = main(["optimize", "run", str(FP32), *flags])
    assert code == 2
    assert "--profile applies to the edge target: add --target edge" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
