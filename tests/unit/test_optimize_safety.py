"""optimize run on models it never saw: scalar regressors, external data, and the user's files.

The default metric must see a scalar regressor's quantization error; a model split into
``model.onnx`` + ``model.onnx.data`` must optimize, load and be sized by every file; and
``--out`` is written only when the whole run passed, never over the source.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

sys.path.insert(0, str(Path(__file__).parent))
from optimize_models import regressor_rows, write_regressor

from servinglib.optimize._session import open_session
from servinglib.optimize.cli import main
from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.measure import MeasureSettings
from servinglib.optimize.pipeline import OptimizeSettings, optimize_model
from servinglib.optimize.quantize import QuantizeOptions, quantize_model
from servinglib.optimize.samples import input_specs, load_samples
from servinglib.optimize.sensitivity import changed_nodes

QUICK = MeasureSettings(warmup=1, iterations=5, repeats=2, batch_size=4)
QUICK_FLAGS = ["--warmup", "1", "--iterations", "5", "--repeats", "2", "--batch-size", "4"]


@pytest.fixture
def regressor(tmp_path: Path) -> Path:
    path = tmp_path / "eta.onnx"
    write_regressor(path)
    np.savez(tmp_path / "valid.npz", x=regressor_rows(200, 1))
    # calibration on data scaled wrongly (e.g. metres instead of kilometres)
    np.savez(tmp_path / "miscalibrated.npz", x=regressor_rows(100, 2, scale=0.05))
    return path


def settings(metric: str = "auto", **changes: object) -> OptimizeSettings:
    values: dict[str, object] = {"metric": metric, "progress": False, "measure": QUICK}
    return OptimizeSettings(**{**values, **changes})  # type: ignore[arg-type]


def test_the_default_metric_rejects_a_miscalibrated_static_scalar_regressor(
    regressor: Path, tmp_path: Path
) -> None:
    def run(metric: str) -> dict[str, dict[str, object]]:
        outcome = optimize_model(
            regressor,
            tmp_path / metric / "eta.onnx",
            validation=tmp_path / "valid.npz",
            calibration=tmp_path / "miscalibrated.npz",
            settings=settings(metric),
        )
        document = outcome.report.to_dict()
        if metric == "auto":
            assert document["accuracy"]["metric"] == "relative-error"
            assert "one value per sample" in document["accuracy"]["why"]
            assert outcome.report.chosen is not None
            assert not outcome.report.chosen.startswith("static")
        return {c["name"]: c for c in document["candidates"]}

    auto = run("auto")
    for name in ("static", "static per-channel"):
        assert auto[name]["accepted"] is False
        metric = auto[name]["metric"]
        assert isinstance(metric, dict)
        assert metric["loss"] > 1.0  # RMSE above the FP32 spread itself
        assert metric["detail"]["rank_correlation"] < 0.6
    # cosine is blind to it (one positive number always has cosine 1 with another): refused
    with pytest.raises(
        OptimizeError, match=r"--metric cosine cannot judge output 'eta'.*relative-error"
    ):
        run("cosine")


def test_a_fixed_miscalibrated_method_fails_its_budget_and_leaves_out_untouched(
    regressor: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "served" / "eta.onnx"
    out.parent.mkdir()
    out.write_bytes(b"the model in production")
    code = main(
        [
            "run", str(regressor), "--method", "static",
            "--validation", str(tmp_path / "valid.npz"),
            "--calibration", str(tmp_path / "miscalibrated.npz"),
            "--max-accuracy-loss", "0.05", "--out", str(out), "--no-progress", *QUICK_FLAGS,
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 1
    assert "max_accuracy_loss" in captured.err
    assert "EXCEEDED" in captured.err
    assert out.read_bytes() == b"the model in production"
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "eta.onnx",
        "optimize-report.json",
        "optimize-report.md",
        "optimize-report.png",
    ]


def test_out_equal_to_the_source_is_refused(
    regressor: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = regressor.read_bytes()
    code = main(
        ["run", str(regressor), "--validation", str(tmp_path / "valid.npz"),
         "--out", str(tmp_path / "." / regressor.name), "--no-progress", *QUICK_FLAGS]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "is the source model" in err
    assert "Traceback" not in err
    assert regressor.read_bytes() == before
    with pytest.raises(OptimizeError, match="is the source model"):
        quantize_model(regressor, regressor, QuantizeOptions())


def test_a_model_with_external_data_optimizes_loads_and_counts_every_file(
    tmp_path: Path,
) -> None:
    source = tmp_path / "model.onnx"
    write_regressor(source, external_data=True)
    data = tmp_path / "model.onnx.data"
    assert data.is_file()
    assert source.stat().st_size < data.stat().st_size
    np.savez(tmp_path / "valid.npz", x=regressor_rows(64, 1))
    out = tmp_path / "int8" / "model.onnx"
    outcome = optimize_model(
        source,
        out,
        validation=tmp_path / "valid.npz",
        settings=settings(method=QuantizeOptions(method="dynamic", per_channel=True)),
    )
    assert outcome.passed, outcome.failures
    assert outcome.model == out
    written = sorted(p.name for p in out.parent.iterdir() if p.name.startswith("model"))
    assert written in (["model.onnx"], ["model.onnx", "model.onnx.data"])
    document = json.loads(outcome.files.json.read_text())
    fp32_bytes = source.stat().st_size + data.stat().st_size
    int8_bytes = sum(p.stat().st_size for p in out.parent.iterdir() if p.name in written)
    assert document["baseline"]["size_mb"] == pytest.approx(fp32_bytes / 1e6)
    assert document["optimized"]["size_mb"] == pytest.approx(int8_bytes / 1e6)
    assert 0 < document["change"]["size_reduction_pct"] < 100
    assert document["baseline"]["path"] == "../model.onnx"
    assert document["optimized"]["path"] == "model.onnx"
    x = regressor_rows(3, 9)
    reference = open_session(source).run({"x": x})
    np.testing.assert_allclose(open_session(out).run({"x": x}), reference, rtol=0.05, atol=2.0)


def test_graph_and_quantize_keep_external_data_loadable(tmp_path: Path) -> None:
    source = tmp_path / "model.onnx"
    write_regressor(source, external_data=True)
    graph_out = tmp_path / "g" / "model.onnx"
    assert main(["graph", str(source), "--out", str(graph_out)]) == 0
    assert (tmp_path / "g" / "model.onnx.data").is_file()
    x = regressor_rows(2, 3)
    expected = open_session(source).run({"x": x})[0]
    np.testing.assert_allclose(open_session(graph_out).run({"x": x})[0], expected, rtol=1e-5)
    quantized = tmp_path / "q" / "model.onnx"
    quantize_model(source, quantized, QuantizeOptions(method="dynamic-per-token"))
    assert open_session(quantized).run({"x": x})[0].shape == (2, 1)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--batch-size", "0"], "--batch-size: 0 is below the minimum 1"),
        (["--repeats", "-1"], "--repeats: -1 is below the minimum 1"),
        (["--max-accuracy-loss", "nan"], "must be a number >= 0"),
        (["--invariance-batch-size", "1"], "below the minimum 2"),
    ],
)
def test_numeric_options_are_validated(
    regressor: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    message: str,
) -> None:
    out = tmp_path / "o" / "eta.onnx"
    with pytest.raises(SystemExit) as exit_info:
        main(["run", str(regressor), "--validation", str(tmp_path / "valid.npz"),
              "--out", str(out), *flags])  # fmt: skip
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.parent.exists()


def test_library_settings_are_validated_too(regressor: Path, tmp_path: Path) -> None:
    bad = settings(measure=MeasureSettings(batch_size=0))
    with pytest.raises(OptimizeError, match="--batch-size is 0; it must be at least 1"):
        optimize_model(
            regressor, tmp_path / "o.onnx", validation=tmp_path / "valid.npz", settings=bad
        )
    with pytest.raises(OptimizeError, match=r"com\.microsoft kernels the quantizer cannot read"):
        optimize_model(
            regressor,
            tmp_path / "o.onnx",
            validation=tmp_path / "valid.npz",
            settings=settings(graph_level="extended"),
        )
    assert not (tmp_path / "o.onnx").exists()


def test_config_with_batching_implies_batch_invariance(
    regressor: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "models" / "eta" / "1").mkdir(parents=True)
    config = tmp_path / "servinglib.yaml"
    config.write_text(
        "service: demo\nmodels:\n  - name: eta\n    runtime: onnx\n"
        "    repository: models/eta\n    default_version: '1'\n"
        "    batching: {max_batch_size: 8, max_queue_delay_us: 1000}\n"
    )
    out = tmp_path / "out" / "eta.onnx"
    code = main(
        ["run", str(regressor), "--validation", str(tmp_path / "valid.npz"),
         "--config", str(config), "--model", "eta", "--max-accuracy-loss", "0.05",
         "--out", str(out), "--no-progress", *QUICK_FLAGS]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert "must be batch-invariant" in captured.err
    document = json.loads((out.parent / "optimize-report.json").read_text())
    assert document["settings"]["require_invariance"] is True
    for candidate in document["candidates"]:
        if candidate["accepted"]:
            assert candidate["invariance"]["invariant"] is True
    assert code in (0, 1)


def test_progress_total_is_stable_and_reaches_it(
    regressor: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["run", str(regressor), "--validation", str(tmp_path / "valid.npz"),
         "--calibration", str(tmp_path / "miscalibrated.npz"),
         "--max-accuracy-loss", "0.05", "--out", str(tmp_path / "o" / "eta.onnx"), *QUICK_FLAGS]
    )  # fmt: skip
    assert code == 0
    counts = re.findall(r"(\d+)/(\d+) \[", capsys.readouterr().err)
    assert counts
    assert len({total for _, total in counts}) == 1
    assert counts[-1][0] == counts[-1][1]


def test_exclusions_target_only_nodes_the_method_changed(regressor: Path, tmp_path: Path) -> None:
    calibration = load_samples(tmp_path / "valid.npz", input_specs(regressor))
    for options, expected in (
        (QuantizeOptions(method="dynamic-per-token", per_channel=True), {"fc1", "fc2"}),
        (QuantizeOptions(method="dynamic"), {"fc1", "fc2"}),
    ):
        out = tmp_path / f"{options.method}.onnx"
        quantize_model(regressor, out, options, calibration=calibration)
        assert changed_nodes(regressor, out) == expected
    static = tmp_path / "static.onnx"
    quantize_model(regressor, static, QuantizeOptions(method="static"), calibration=calibration)
    assert {"fc1", "fc2"} <= changed_nodes(regressor, static)


def test_error_messages_cut_temporary_paths_to_file_names(tmp_path: Path) -> None:
    import tempfile

    from servinglib.optimize._messages import first_line

    work = Path(tempfile.gettempdir()) / "servinglib-optimize-ab12cd34" / "candidate-3.onnx"
    staged = Path("/srv/work/.eta.onnx.k2j3h4g5/eta.onnx")
    message = first_line(RuntimeError(f"Load model from {work} failed: bad\nstack"))
    assert message == "Load model from candidate-3.onnx failed: bad"
    assert first_line(RuntimeError(f"cannot open {staged}")) == "cannot open eta.onnx"
    user = Path("/srv/models/eta.onnx")
    assert first_line(RuntimeError(f"cannot open {user}")) == f"cannot open {user}"


def test_measured_sessions_are_set_up_as_the_server_sets_them_up(regressor: Path) -> None:
    import onnxruntime as ort

    from servinglib.runtimes.onnx import session_options

    served = session_options(ort, graph_level="all", intra_op_threads=1)
    measured = open_session(regressor, threads=1).raw.get_session_options()
    for options in (served, measured):
        assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        assert options.intra_op_num_threads == 1
        assert options.inter_op_num_threads == 1
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_cli_runs_a_user_metric(
    regressor: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "eta_metrics.py").write_text(
        "import numpy as np\n"
        "def late_share(reference, candidate, labels):\n"
        "    return float(np.mean([c.item() > r.item() + 60 for r, c in zip(reference, candidate)]))\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        code = main(
            ["run", str(regressor), "--validation", str(tmp_path / "valid.npz"),
             "--method", "dynamic", "--metric", "eta_metrics:late_share",
             "--out", str(tmp_path / "o" / "eta.onnx"), "--no-progress", *QUICK_FLAGS]
        )  # fmt: skip
    finally:
        sys.path.remove(str(tmp_path))
        # Another test writes its own eta_metrics.py: never reuse this one.
        sys.modules.pop("eta_metrics", None)
    out = capsys.readouterr().out
    assert code == 0
    assert "metric eta_metrics:late_share on all outputs: the user metric named by" in out
    document = json.loads((tmp_path / "o" / "optimize-report.json").read_text())
    assert document["accuracy"]["metric"] == "eta_metrics:late_share"
    assert document["accuracy"]["loss"] == 0.0


def test_an_error_in_the_middle_of_a_run_leaves_out_untouched(
    regressor: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "served" / "eta.onnx"
    out.parent.mkdir()
    out.write_bytes(b"the model in production")
    code = main(
        ["run", str(regressor), "--validation", str(tmp_path / "valid.npz"),
         "--output", "no_such_output", "--out", str(out), "--no-progress", *QUICK_FLAGS]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "has no output 'no_such_output'; its outputs are ['eta']" in err
    assert "Traceback" not in err
    assert out.read_bytes() == b"the model in production"
    assert [p.name for p in out.parent.iterdir()] == ["eta.onnx"]
