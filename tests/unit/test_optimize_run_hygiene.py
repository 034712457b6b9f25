"""A run cleans up after signals, scores on unseen samples and says what it needs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

sys.path.insert(0, str(Path(__file__).parent))
from optimize_models import regressor_rows, write_regressor

from servinglib.optimize._files import StagedOutput
from servinglib.optimize.measure import MeasureSettings
from servinglib.optimize.pipeline import OptimizeSettings, optimize_model
from servinglib.optimize.quantize import QuantizeOptions
from servinglib.optimize.samples import input_specs, load_samples
from servinglib.optimize.search import SearchSettings, search_candidates

REPOSITORY = Path(__file__).resolve().parents[2]
QUICK = MeasureSettings(warmup=1, iterations=5, repeats=2, batch_size=4, min_round_s=0.0)


@pytest.fixture
def regressor(tmp_path: Path) -> Path:
    path = tmp_path / "fp32" / "eta.onnx"
    path.parent.mkdir()
    write_regressor(path)
    np.savez(tmp_path / "valid.npz", x=regressor_rows(40, 1))
    return path


@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")],
)
def test_a_signal_removes_staging_and_work_directories(
    regressor: Path, tmp_path: Path, signum: int, code: int, word: str
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "int8" / "eta.onnx"
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(REPOSITORY)}
    process = subprocess.Popen(
        [sys.executable, "-m", "servinglib.optimize.cli", "run", str(regressor),
         "--validation", str(tmp_path / "valid.npz"), "--method", "dynamic",
         "--iterations", "1000000", "--no-progress", "--out", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        # measuring: the chosen model is staged and the work directory exists
        while not (list(out.parent.glob(".eta.onnx.*/eta.onnx")) and list(scratch.glob("servi*"))):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the run never reached its measurement"
            time.sleep(0.05)
        process.send_signal(signum)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == code, err
    assert word in err
    assert "Traceback" not in err
    assert list(scratch.glob("servinglib-*")) == []  # the work directories are gone
    assert not out.parent.exists()  # no staging directory, no partial model, no empty dir


def test_static_is_calibrated_and_scored_on_disjoint_halves(
    regressor: Path, tmp_path: Path
) -> None:
    outcome = optimize_model(
        regressor,
        tmp_path / "o" / "eta.onnx",
        validation=tmp_path / "valid.npz",
        settings=OptimizeSettings(
            method=QuantizeOptions(method="static"), progress=False, measure=QUICK
        ),
    )
    document = outcome.report.to_dict()
    assert document["settings"]["calibration_samples"] == 20
    assert document["settings"]["validation_samples"] == 20
    assert any("calibrated on 20 of the validation samples" in w for w in document["warnings"])


def test_report_paths_are_relative_to_the_report_and_the_selftest_tolerance_is_given(
    regressor: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    outcome = optimize_model(
        Path("fp32/eta.onnx"),
        Path("int8/eta.onnx"),
        validation=Path("valid.npz"),
        report_dir=Path("reports/today"),
        settings=OptimizeSettings(
            method=QuantizeOptions(method="dynamic"), progress=False, measure=QUICK
        ),
    )
    document = json.loads(outcome.files.json.read_text())
    assert document["baseline"]["path"] == "../../fp32/eta.onnx"
    assert document["optimized"]["path"] == "../../int8/eta.onnx"
    tolerance = document["selftest_tolerance"]
    assert tolerance["atol"] >= 1.5 * tolerance["max_abs_diff_fp32"] > 0
    assert tolerance["atol"] >= 1.5 * tolerance["max_abs_batch_deviation"]
    assert '"tolerance": {"atol": ' in outcome.files.markdown.read_text()


def test_a_commit_gives_data_files_the_graphs_mode_and_a_failure_removes_new_parents(
    tmp_path: Path,
) -> None:
    destination = tmp_path / "a" / "b" / "model.onnx"

    def fail_midway() -> None:
        with StagedOutput(destination) as staged:
            staged.path.write_bytes(b"half")
            raise RuntimeError("the run failed")

    with pytest.raises(RuntimeError):
        fail_midway()
    assert list(tmp_path.iterdir()) == []
    write_regressor(tmp_path / "src.onnx", external_data=True)
    with StagedOutput(destination) as staged:
        shutil.copy(tmp_path / "src.onnx", staged.path)
        shutil.copy(tmp_path / "src.onnx.data", staged.path.parent / "src.onnx.data")
        os.chmod(staged.path.parent / "src.onnx.data", 0o600)
        staged.commit()
    umask = os.umask(0)
    os.umask(umask)
    expected = 0o666 & ~umask
    assert (destination.stat().st_mode & 0o777) == expected
    assert ((destination.parent / "src.onnx.data").stat().st_mode & 0o777) == expected


def test_fp32_that_is_not_batch_invariant_is_not_blamed_on_quantization(tmp_path: Path) -> None:
    from onnx import TensorProto, helper, numpy_helper, save

    # y = (x / max|x| over the whole batch) @ W: FP32 itself depends on the batch
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [
            helper.make_node("Abs", ["x"], ["a"], name="abs"),
            helper.make_node("ReduceMax", ["a"], ["m"], name="batch_max", keepdims=1),
            helper.make_node("Div", ["x", "m"], ["u"], name="normalize"),
            helper.make_node("MatMul", ["u", "w"], ["y"], name="head"),
        ],
        "batch_normalized",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(rng.normal(size=(8, 4)).astype(np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(tmp_path / "m.onnx"))
    x = rng.normal(size=(24, 8)).astype(np.float32)
    x[5] *= 10.0
    np.savez(tmp_path / "v.npz", x=x)
    samples = load_samples(tmp_path / "v.npz", input_specs(tmp_path / "m.onnx"))
    result = search_candidates(
        tmp_path / "m.onnx",
        tmp_path,
        samples,
        samples,
        SearchSettings(
            metric="relative-error", max_loss=1.0, require_invariance=True, measure=QUICK
        ),
        candidates=[QuantizeOptions(method="static")],
    )
    assert result.fp32_invariance is not None
    assert not result.fp32_invariance.invariant
    (static,) = result.candidates
    assert static.invariance is not None
    assert not static.invariance.invariant  # it inherits FP32's batch dependence ...
    assert static.accepted, static.reasons  # ... which is not quantization's doing
