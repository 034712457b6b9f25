"""servinglib optimize run: accuracy-aware search, report, budgets, measurement, CLI exit codes."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servinglib.cli.main import main
from servinglib.config.spec import load_config
from servinglib.errors import ConfigError
from servinglib.model import Model
from servinglib.optimize.accuracy import evaluate
from servinglib.optimize.budgets import (
    Budgets,
    budgets_for_model,
    check_budgets,
    check_served_version,
)
from servinglib.optimize.invariance import check_model_batch_invariance
from servinglib.optimize.measure import (
    MeasureSettings,
    cpu_info,
    measure_latency,
    measure_throughput,
)
from servinglib.optimize.pipeline import OptimizeSettings, optimize_model
from servinglib.optimize.quantize import QuantizeOptions, quantize_model
from servinglib.optimize.report import REPORT_FIELDS
from servinglib.optimize.samples import input_specs, load_samples
from servinglib.optimize.search import SearchSettings, search_candidates

IN, HIDDEN, OUT = 16, 64, 5
QUICK = MeasureSettings(threads=1, warmup=2, iterations=5, repeats=2, batch_size=8)


def write_mlp(path: Path, *, outlier_feature: bool = False) -> None:
    """logits = relu(x @ W1) @ W2, built with onnx.helper.

    With ``outlier_feature``, input feature 0 is huge (x1000) but nearly unused (its weights
    are /1000): one activation scale for the whole input then wastes the int8 range on it,
    and only leaving ``layer1`` in float keeps the outputs exact.
    """
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 1 / np.sqrt(IN), (IN, HIDDEN)).astype(np.float32)
    if outlier_feature:
        w1[0] /= 1000.0
    w2 = rng.normal(0, 1 / np.sqrt(HIDDEN), (HIDDEN, OUT)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W1"], ["h0"], name="layer1"),
            helper.make_node("Relu", ["h0"], ["h"], name="relu"),
            helper.make_node("MatMul", ["h", "W2"], ["logits"], name="layer2"),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", IN])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", OUT])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))


def rows(count: int, seed: int, *, outlier_feature: bool = False) -> np.ndarray:
    x = np.random.default_rng(seed).normal(0, 1, (count, IN)).astype(np.float32)
    if outlier_feature:
        x[:, 0] *= 1000.0
    return x


def fp32_labels(model: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    logits: np.ndarray = session.run(None, {"x": x})[0]
    return logits.argmax(axis=1)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "fp32" / "model.onnx"
    path.parent.mkdir()
    write_mlp(path)
    return path


@pytest.fixture
def validation(tmp_path: Path, model: Path) -> Path:
    x = rows(40, seed=1)
    path = tmp_path / "validation.npz"
    np.savez(path, x=x, labels=fp32_labels(model, x))
    return path


@pytest.fixture
def calibration(tmp_path: Path) -> Path:
    path = tmp_path / "calibration.npz"
    np.savez(path, x=rows(40, seed=2))
    return path


def run_cli(*args: str) -> int:
    return main(["optimize", "run", *args, "--no-progress", *QUICK_FLAGS])


QUICK_FLAGS = ("--warmup", "2", "--iterations", "5", "--repeats", "2", "--batch-size", "8")


# --- metrics ------------------------------------------------------------------------------


def test_metrics_give_value_and_loss() -> None:
    reference = [np.array([[0.1, 0.9]]), np.array([[0.8, 0.2]])]
    flipped = [np.array([[0.9, 0.1]]), np.array([[0.8, 0.2]])]
    labels = np.array([1, 1])
    accuracy = evaluate("accuracy", reference=reference, candidate=flipped, labels=labels)
    assert (accuracy.value, accuracy.loss, accuracy.detail["fp32"]) == (0.0, 0.5, 0.5)
    top1 = evaluate("top1", reference=reference, candidate=flipped)
    assert (top1.value, top1.loss) == (0.5, 0.5)
    cosine = evaluate("cosine", reference=reference, candidate=reference)
    assert cosine.loss == pytest.approx(0.0)
    assert cosine.detail["min"] == pytest.approx(1.0)
    error = evaluate("max-abs-error", reference=reference, candidate=flipped)
    assert error.value == pytest.approx(0.8)
    assert error.loss == error.value


# --- search -------------------------------------------------------------------------------


def test_search_picks_the_fastest_accepted_candidate(
    model: Path, validation: Path, calibration: Path, tmp_path: Path
) -> None:
    specs = input_specs(model)
    result = search_candidates(
        model,
        tmp_path,
        load_samples(validation, specs),
        load_samples(calibration, specs),
        SearchSettings(metric="top1", max_loss=0.1, measure=QUICK),
    )
    names = [c.name for c in result.candidates]
    assert names == [
        "dynamic",
        "dynamic per-channel",
        "dynamic-per-token per-channel",
        "static",
        "static per-channel",
    ]
    accepted = [c for c in result.candidates if c.accepted]
    assert len(accepted) >= 2
    assert result.chosen is not None
    assert result.chosen.accepted
    assert all(c.latency is not None for c in accepted)
    assert result.chosen.latency is not None
    # two rounds cannot tell candidates apart: the batch-invariant, smallest one is kept
    assert "indistinguishable" in result.choice_reason or "cannot tell" in result.choice_reason
    assert result.chosen.invariance is not None
    assert result.chosen.invariance.invariant
    invariant = [c for c in accepted if c.invariance and c.invariance.invariant]
    assert result.chosen.size_mb == min(c.size_mb or 0.0 for c in invariant)


def test_search_leaves_sensitive_nodes_in_float_when_nothing_else_fits(tmp_path: Path) -> None:
    model = tmp_path / "outlier.onnx"
    write_mlp(model, outlier_feature=True)
    x = rows(40, seed=1, outlier_feature=True)
    np.savez(tmp_path / "valid.npz", x=x)
    samples = load_samples(tmp_path / "valid.npz", input_specs(model))
    result = search_candidates(
        model,
        tmp_path,
        samples,
        samples,
        SearchSettings(metric="cosine", max_loss=1e-4, measure=QUICK),
    )
    base = result.candidates[:5]
    assert not any(c.accepted for c in base), result.explain()
    assert result.chosen is not None, result.explain()
    assert result.chosen.options.exclude_nodes == ("layer1",)
    assert result.chosen.name.endswith("1 node(s) excluded")


def test_required_batch_invariance_rejects_dynamic(
    model: Path, calibration: Path, tmp_path: Path
) -> None:
    x = rows(24, seed=1)
    x[3] *= 300.0  # an outlier request
    np.savez(tmp_path / "valid.npz", x=x)
    specs = input_specs(model)
    result = search_candidates(
        model,
        tmp_path,
        load_samples(tmp_path / "valid.npz", specs),
        load_samples(calibration, specs),
        SearchSettings(metric="top1", max_loss=1.0, require_invariance=True, measure=QUICK),
    )
    by_name = {c.name: c for c in result.candidates}
    assert not by_name["dynamic"].accepted
    assert "not batch-invariant" in by_name["dynamic"].reasons[0]
    assert by_name["dynamic-per-token per-channel"].accepted
    assert by_name["static"].accepted
    assert result.chosen is not None
    assert result.chosen.options.method in ("dynamic-per-token", "static")


# --- pipeline and report ------------------------------------------------------------------


def test_report_json_has_every_field(
    model: Path, validation: Path, calibration: Path, tmp_path: Path
) -> None:
    out = tmp_path / "int8" / "model.onnx"
    outcome = optimize_model(
        model,
        out,
        validation=validation,
        calibration=calibration,
        report_dir=tmp_path / "report",
        settings=OptimizeSettings(
            method=QuantizeOptions(method="static"),
            metric="accuracy",
            measure=QUICK,
            progress=False,
        ),
    )
    assert outcome.passed
    assert outcome.model == out
    assert out.is_file()
    document = json.loads(outcome.files.json.read_text())
    assert tuple(document) == REPORT_FIELDS
    for side in ("baseline", "optimized"):
        figures = document[side]
        assert set(figures) == {
            "path",
            "size_mb",
            "latency_ms",
            "throughput",
            "metric_value",
            "invariance",
        }
        assert figures["latency_ms"]["p95_ms"] >= figures["latency_ms"]["p50_ms"] > 0
        assert len(figures["latency_ms"]["rounds_p50_ms"]) == QUICK.repeats
        assert figures["throughput"]["batch_size"] == 8
        assert figures["throughput"]["samples_per_s"] > 0
        assert figures["invariance"]["invariant"] is True
    assert document["optimized"]["size_mb"] < document["baseline"]["size_mb"]
    assert set(document["machine"]) >= {"model", "logical_cores", "avx2", "avx512_vnni", "vnni"}
    assert set(document["change"]) == {
        "size_reduction_pct",
        "p50_speedup",
        "p95_speedup",
        "throughput_speedup",
        "claims",
    }
    # two rounds cannot separate anything: no speed-up is claimed, intervals are given
    for figure in ("p50", "p95", "throughput"):
        claim = document["change"]["claims"][figure]
        assert claim["verdict"] == "no measurable difference"
        assert claim["interval"][0] <= claim["interval"][1]
        assert "too few" in claim["why"]
    assert document["accuracy"]["metric"] == "accuracy"
    assert document["accuracy"]["fp32"] == 1.0
    assert document["accuracy"]["loss"] == pytest.approx(1.0 - document["accuracy"]["optimized"])
    assert document["chosen"] == "static"
    assert document["settings"]["mode"] == "fixed method"
    assert document["settings"]["calibration_samples"] == 40
    assert document["graph"]["level"] == "basic"
    assert [c["name"] for c in document["candidates"]] == ["static"]
    assert document["budgets"] == []
    assert document["passed"] is True
    markdown = outcome.files.markdown.read_text()
    assert "| size (MB) |" in markdown
    assert "single request p95 (ms)" in markdown
    assert "## Candidates" in markdown
    assert outcome.files.chart.read_bytes().startswith(b"\x89PNG")


def test_no_candidate_fits_still_writes_the_report_and_says_why(
    model: Path, validation: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_cli(
        str(model),
        "--validation",
        str(validation),
        "--metric",
        "max-abs-error",
        "--max-accuracy-loss",
        "0",
        "--out",
        str(tmp_path / "int8.onnx"),
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "no candidate fits" in err
    assert "dynamic per-channel: loss" in err
    assert "> max 0" in err
    assert not (tmp_path / "int8.onnx").exists()
    document = json.loads((tmp_path / "optimize-report.json").read_text())
    assert document["chosen"] is None
    assert document["optimized"] is None
    assert document["passed"] is False
    assert len(document["candidates"]) >= 5  # base candidates, then sensitive nodes excluded
    assert "No candidate fits" in (tmp_path / "optimize-report.md").read_text()


# --- budgets ------------------------------------------------------------------------------


def test_budgets_exit_zero_within_and_non_zero_when_exceeded(
    model: Path, validation: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = [
        str(model),
        "--validation",
        str(validation),
        "--method",
        "dynamic-per-token",
        "--metric",
        "accuracy",
        "--out",
        str(tmp_path / "int8.onnx"),
    ]
    generous = ["--max-size-mb", "5", "--max-latency-ms", "1000", "--max-accuracy-loss", "0.5"]
    assert run_cli(*common, *generous) == 0
    out = capsys.readouterr()
    assert "wrote" in out.out
    assert "FAILED" not in out.err
    assert run_cli(*common, "--max-size-mb", "0.0001") == 1
    assert "max_size_mb: " in capsys.readouterr().err
    assert run_cli(*common, "--max-latency-ms", "0.000001") == 1
    assert "max_latency_ms:" in capsys.readouterr().err
    document = json.loads((tmp_path / "optimize-report.json").read_text())
    assert document["budgets"][0]["budget"] == "max_latency_ms"
    assert document["budgets"][0]["passed"] is False
    assert "EXCEEDED" in document["budgets"][0]["description"]


def test_budgets_from_servinglib_yaml_are_overridden_by_flags(
    model: Path, validation: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "models" / "mlp" / "1").mkdir(parents=True)
    config = tmp_path / "servinglib.yaml"
    config.write_text(
        "service: demo\nmodels:\n  - name: mlp\n    runtime: onnx\n"
        "    repository: models/mlp\n    default_version: '1'\n"
    )
    loaded = load_config(config)
    assert budgets_for_model(loaded, "mlp") == Budgets()
    with pytest.raises(ConfigError, match="no model 'other'"):
        budgets_for_model(loaded, "other")
    common = [str(model), "--validation", str(validation), "--method", "dynamic"]
    assert run_cli(*common, "--config", str(config)) == 2
    assert "--config needs --model" in capsys.readouterr().err
    assert run_cli(*common, "--config", str(config), "--model", "mlp") == 0


@dataclass
class FakeEntry:
    name: str
    key_path: str
    optimize_budgets: dict[str, Any]


@dataclass
class FakeConfig:
    source: Path
    models: tuple[FakeEntry, ...]


def test_budgets_read_and_check() -> None:
    config: Any = FakeConfig(
        Path("servinglib.yaml"),
        (FakeEntry("digits", "models[0]", {"max_size_mb": 5, "max_latency_ms": 15}),),
    )
    budgets = budgets_for_model(config, "digits")
    assert budgets == Budgets(max_size_mb=5.0, max_latency_ms=15.0)
    assert budgets.override(Budgets(max_size_mb=1.0)).max_size_mb == 1.0
    assert budgets.override(Budgets()).max_size_mb == 5.0
    results = check_budgets(budgets, size_mb=6.0, latency_ms=3.0, loss=None)
    assert [(r.budget, r.passed) for r in results] == [
        ("max_size_mb", False),
        ("max_latency_ms", True),
    ]
    assert results[0].describe() == "max_size_mb: 6 > 5 (EXCEEDED)"
    missing_loss = check_budgets(
        Budgets(max_accuracy_loss=0.01), size_mb=1, latency_ms=1, loss=None
    )
    assert not missing_loss[0].passed
    with pytest.raises(ConfigError, match=r"unknown budget\(s\) \['max_size'\]"):
        Budgets.from_mapping({"max_size": 5})
    with pytest.raises(ConfigError, match=r"models\[0\]\.optimize_budgets\.max_size_mb"):
        Budgets.from_mapping({"max_size_mb": -1}, key_path="models[0].optimize_budgets")


# --- measurement --------------------------------------------------------------------------


CPUINFO = """processor\t: 0
model name\t: Example CPU 9000
flags\t\t: fpu sse avx2 avx512f avx512_vnni
"""


def test_cpu_info_reads_the_int8_flags() -> None:
    info = cpu_info(CPUINFO)
    assert info.model == "Example CPU 9000"
    assert (info.avx2, info.avx512f, info.avx512_vnni, info.avx_vnni) == (True, True, True, False)
    assert info.vnni
    assert not cpu_info("flags : sse avx2\n").vnni
    assert cpu_info().logical_cores >= 1


class FakeSession:
    def __init__(self, clock: list[float], cost: float) -> None:
        self.clock, self.cost, self.calls = clock, cost, 0

    def run(self, feed: Any) -> np.ndarray:
        self.clock[0] += self.cost
        self.calls += 1
        return np.zeros(1)


def test_latency_excludes_warmup_and_takes_the_median_round() -> None:
    clock = [0.0]
    fast, slow = FakeSession(clock, 0.001), FakeSession(clock, 0.004)
    settings = MeasureSettings(warmup=3, iterations=10, repeats=3, batch_size=4)
    stats = measure_latency(
        {"fast": fast, "slow": slow},  # type: ignore[dict-item]
        {"x": np.zeros((1, 2))},
        settings,
        clock=lambda: clock[0],
    )
    assert fast.calls == 3 + 10 * 3
    assert stats["fast"].p50_ms == pytest.approx(1.0)
    assert stats["slow"].p95_ms == pytest.approx(4.0)
    assert len(stats["slow"].rounds_p95_ms) == 3
    throughput = measure_throughput(
        {"fast": fast},  # type: ignore[dict-item]
        {"x": np.zeros((4, 2))},
        settings,
        clock=lambda: clock[0],
    )
    assert throughput["fast"].samples_per_s == pytest.approx(4000.0)
    assert throughput["fast"].batch_size == 4


def test_progress_bar_runs(
    model: Path, validation: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "optimize",
            "run",
            str(model),
            "--validation",
            str(validation),
            "--method",
            "dynamic",
            "--out",
            str(tmp_path / "q.onnx"),
            *QUICK_FLAGS,
        ]
    )
    assert code == 0
    assert "optimize:" in capsys.readouterr().err


def test_public_names_resolve_lazily_to_the_api_not_to_submodules() -> None:
    import ast
    import subprocess
    from types import ModuleType

    import servinglib.optimize as optimize

    assert optimize.__all__ == sorted(optimize.__all__)
    assert set(optimize.__all__) == set(optimize._EXPORTS)
    tree = ast.parse(Path(optimize.__file__).read_text(encoding="utf-8"))
    typed = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("servinglib.optimize.")
        for alias in node.names
    }
    assert typed == set(optimize.__all__)
    for name in optimize.__all__:
        value = getattr(optimize, name)
        assert not isinstance(value, ModuleType), name
        assert value.__module__ == f"servinglib.optimize.{optimize._EXPORTS[name]}", name
    # `servinglib --help` must not pay for numpy, onnx or torch through the optimize parser
    code = (
        "import sys, servinglib.cli.main as c; c._parser(); "
        "print(sorted(m for m in ('numpy', 'onnx', 'onnxruntime', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- checks of a served model (for servinglib selftest) ----------------------------------


class RowwiseModel(Model):
    """Each request on its own: batch-invariant."""

    def load(self, path: Path) -> None:
        pass

    def predict(self, features: Any) -> dict[str, Any]:
        return {"y": np.asarray(features["x"], dtype=np.float64) * 2.0}

    def predict_batch(self, batch: Sequence[Any]) -> list[Any]:
        return [self.predict(features) for features in batch]


class BatchScaledModel(RowwiseModel):
    """Rounds to a grid set by the largest value in the batch, as dynamic INT8 does."""

    def predict_batch(self, batch: Sequence[Any]) -> list[Any]:
        x = np.stack([np.asarray(f["x"], dtype=np.float64) for f in batch])
        step = np.abs(x).max() / 127.0
        return [{"y": np.round(row / step) * step * 2.0} for row in x]


def test_model_batch_invariance_of_a_served_model() -> None:
    inputs = [{"x": [0.01 * i, 0.5, -0.25]} for i in range(6)] + [{"x": [900.0, 1.0, 2.0]}]
    assert check_model_batch_invariance(RowwiseModel(), inputs).invariant
    flagged = check_model_batch_invariance(BatchScaledModel(), inputs, batch_size=4)
    assert not flagged.invariant
    assert flagged.samples == 7
    assert flagged.worst_relative > 0.1


def test_served_version_size_and_latency_budgets(tmp_path: Path) -> None:
    version = tmp_path / "2"
    version.mkdir()
    (version / "model.bin").write_bytes(b"\0" * 2_000_000)
    (version / "test_data.json").write_text("{}")
    clock = [0.0]

    class TimedModel(RowwiseModel):
        def predict(self, features: Any) -> dict[str, Any]:
            clock[0] += 0.004
            return super().predict(features)

    def check(budgets: Budgets) -> list[Any]:
        return check_served_version(
            TimedModel(),
            version,
            [{"x": [1.0]}],
            replace(budgets, versions=("2",)),
            runs=5,
            clock=lambda: clock[0],
        )

    within = check(Budgets(max_size_mb=2.5, max_latency_ms=5.0, max_accuracy_loss=0.0))
    assert [(r.budget, r.passed) for r in within] == [
        ("max_size_mb", True),
        ("max_latency_ms", True),
    ]
    assert within[0].actual == pytest.approx(2.0)
    assert within[1].actual == pytest.approx(4.0)
    exceeded = check(Budgets(max_size_mb=1.0, max_latency_ms=3.0))
    assert [r.passed for r in exceeded] == [False, False]


def test_budgets_belong_to_their_versions(tmp_path: Path, model: Path) -> None:
    fp32, int8 = tmp_path / "repo" / "1", tmp_path / "repo" / "2"
    fp32.mkdir(parents=True)
    int8.mkdir()
    shutil.copyfile(model, fp32 / "model.onnx")
    quantize_model(model, int8 / "model.onnx", QuantizeOptions(method="dynamic"))
    tiny = Budgets(max_size_mb=0.000001)

    def results(budgets: Budgets, version: Path) -> list[bool]:
        return [r.passed for r in check_served_version(RowwiseModel(), version, [], budgets)]

    # no `versions:`: an FP32 ONNX version is not held to an INT8 budget; others are
    assert results(tiny, fp32) == []
    assert results(tiny, int8) == [False]
    python_only = tmp_path / "repo" / "3"
    python_only.mkdir()
    (python_only / "weights.bin").write_bytes(b"\0" * 100)
    assert results(tiny, python_only) == [False]
    # `versions:` names them explicitly
    listed = Budgets.from_mapping({"max_size_mb": 0.000001, "versions": ["1"]})
    assert listed.versions == ("1",)
    assert results(listed, fp32) == [False]
    assert results(listed, int8) == []
    with pytest.raises(ConfigError, match="not a list of version names"):
        Budgets.from_mapping({"max_size_mb": 1, "versions": "2"})


def test_a_missing_extra_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from servinglib.optimize._deps import require
    from servinglib.optimize.errors import OptimizeError

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    with pytest.raises(OptimizeError, match=r"exporting needs 'torch'.*pip install torch"):
        require("torch", "exporting")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(OptimizeError, match=r"servinglib\[optimize\]"):
        require("onnxruntime", "quantization")
