"""servinglib optimize judges every output, refuses blind metrics and non-finite data."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

sys.path.insert(0, str(Path(__file__).parent))
from optimize_models import write_sigmoid, write_two_head

from servinglib.optimize.accuracy import MetricResult
from servinglib.optimize.budgets import Budgets, check_budgets
from servinglib.optimize.cli import main
from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.judging import OutputScore, parse_metric_spec
from servinglib.optimize.report import validate_report

QUICK_FLAGS = (
    "--warmup", "1", "--iterations", "5", "--repeats", "2", "--batch-size", "4",
    "--min-round-s", "0", "--no-progress",
)  # fmt: skip


def rows(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (count, 8)).astype(np.float32)


def run(*args: str) -> int:
    return main(["run", *args, *QUICK_FLAGS])


def report(directory: Path) -> dict[str, Any]:
    def refuse(constant: str) -> None:
        raise AssertionError(f"report holds {constant}: not strict JSON")

    text = (directory / "optimize-report.json").read_text()
    document: dict[str, Any] = json.loads(text, parse_constant=refuse)
    return document


@pytest.fixture
def two_head(tmp_path: Path) -> Path:
    path = tmp_path / "two_head.onnx"
    write_two_head(path)
    np.savez(tmp_path / "valid.npz", x=rows(24, 1))
    return path


def test_every_output_is_judged_and_each_budget_holds_its_own(
    two_head: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o" / "model.onnx"
    code = run(
        str(two_head), "--validation", str(tmp_path / "valid.npz"), "--method", "dynamic",
        "--max-accuracy-loss", "class_logits=0.5", "--max-accuracy-loss", "amount=0.000001",
        "--out", str(out),
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 1, captured.err
    assert "max_accuracy_loss[amount]" in captured.err
    assert "EXCEEDED" in captured.err
    assert not out.exists()
    document = report(out.parent)
    judged = {row["output"]: row for row in document["accuracy"]["outputs"]}
    assert set(judged) == {"class_logits", "amount"}
    assert judged["class_logits"]["metric"] == "top1"
    assert judged["amount"]["metric"] == "relative-error"
    assert judged["class_logits"]["passed"] is True
    assert judged["amount"]["passed"] is False
    assert judged["amount"]["loss"] > 0.000001
    assert [o["output"] for o in document["candidates"][0]["outputs"]] == [
        "class_logits",
        "amount",
    ]
    # the report's Markdown has a row per output
    markdown = (out.parent / "optimize-report.md").read_text()
    assert "| `class_logits`: top1 vs FP32 |" in markdown
    assert "| `amount`: relative-error vs FP32 |" in markdown


def test_the_search_rejects_a_candidate_when_one_output_fails(
    two_head: Path, tmp_path: Path
) -> None:
    from servinglib.optimize.samples import input_specs, load_samples
    from servinglib.optimize.search import SearchSettings, search_candidates

    samples = load_samples(tmp_path / "valid.npz", input_specs(two_head))
    result = search_candidates(
        two_head,
        tmp_path,
        samples,
        None,
        SearchSettings(
            max_loss=1.0, output_losses={"amount": 0.0}, measure=_quick(), max_excluded=0
        ),
    )
    assert result.chosen is None
    for candidate in result.candidates:
        assert [s.output for s in candidate.scores] == ["class_logits", "amount"]
        assert any("output 'amount': relative-error loss" in r for r in candidate.reasons)
        assert not any("class_logits" in r for r in candidate.reasons)


def test_a_user_metric_receives_every_output(two_head: Path, tmp_path: Path) -> None:
    (tmp_path / "two_head_metrics.py").write_text(
        "import numpy as np\n"
        "def amount_error(reference, candidate, labels):\n"
        "    assert sorted(reference) == ['amount', 'class_logits'], sorted(reference)\n"
        "    return float(np.mean([abs(c.item() - r.item()) for r, c in\n"
        "                          zip(reference['amount'], candidate['amount'])]))\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        code = run(
            str(two_head), "--validation", str(tmp_path / "valid.npz"), "--method", "dynamic",
            "--metric", "two_head_metrics:amount_error", "--out", str(tmp_path / "o" / "m.onnx"),
        )  # fmt: skip
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("two_head_metrics", None)
    assert code == 0
    (row,) = report(tmp_path / "o")["accuracy"]["outputs"]
    assert row["output"] == "all outputs"
    assert row["loss"] > 0  # whole units of amount, seen only through the second output


@pytest.mark.parametrize("metric", ["accuracy", "top1", "cosine"])
def test_a_blind_metric_on_a_one_value_output_is_refused(
    metric: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "sigmoid.onnx"
    write_sigmoid(model)
    x = rows(20, 2)
    np.savez(tmp_path / "valid.npz", x=x, labels=(x[:, 0] > 0).astype(np.int64))
    code = run(
        str(model), "--validation", str(tmp_path / "valid.npz"), "--method", "dynamic",
        "--metric", metric, "--out", str(tmp_path / "o" / "m.onnx"),
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert f"error: --metric {metric} cannot judge output 'p'" in err
    assert "one value per sample" in err
    assert "--metric p=relative-error" in err
    assert not (tmp_path / "o" / "m.onnx").exists()


def test_metric_specs_per_output() -> None:
    spec = parse_metric_spec("class_logits=top1, amount=relative-error")
    assert spec.default == "auto"
    assert dict(spec.per_output) == {"class_logits": "top1", "amount": "relative-error"}
    assert parse_metric_spec("cosine,amount=max-abs-error").default == "cosine"
    with pytest.raises(OptimizeError, match="two default metrics"):
        parse_metric_spec("cosine,top1")
    with pytest.raises(OptimizeError, match="'l1' is not one of"):
        parse_metric_spec("amount=l1")


def test_one_nan_in_the_validation_data_is_refused_naming_row_and_column(
    two_head: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x = rows(12, 3)
    x[3, 5] = np.nan
    np.savez(tmp_path / "nan.npz", x=x)
    code = run(
        str(two_head), "--validation", str(tmp_path / "nan.npz"), "--out", str(tmp_path / "q.onnx")
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "nan.npz: sample 3 (counting from 0), input 'x', column 5 is nan" in err
    np.savez(tmp_path / "calib.npz", x=np.full((8, 8), np.nan, np.float32))
    code = run(
        str(two_head), "--validation", str(tmp_path / "valid.npz"), "--method", "static",
        "--calibration", str(tmp_path / "calib.npz"), "--out", str(tmp_path / "q.onnx"),
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "calib.npz: sample 0 (counting from 0), input 'x', column 0 is nan" in err
    assert "Traceback" not in err


def test_a_non_finite_fp32_output_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from onnx import TensorProto, helper, numpy_helper, save

    graph = helper.make_graph(
        [
            helper.make_node("Sqrt", ["x"], ["r"], name="root"),
            helper.make_node("MatMul", ["r", "w"], ["y"], name="head"),
        ],
        "sqrt",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        [numpy_helper.from_array(np.ones((8, 2), np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(tmp_path / "sqrt.onnx"))
    x = np.abs(rows(6, 4))
    x[2, 1] = -1.0  # a finite input the model turns into NaN
    np.savez(tmp_path / "valid.npz", x=x)
    code = run(
        str(tmp_path / "sqrt.onnx"), "--validation", str(tmp_path / "valid.npz"),
        "--method", "dynamic", "--out", str(tmp_path / "q.onnx"),
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "the FP32 model's output 'y' is nan for validation sample 2" in err


def test_a_nan_loss_fails_and_reports_stay_strict_json() -> None:
    nan = MetricResult("relative-error", math.nan, math.nan, 4)
    assert not OutputScore("amount", nan, None).passed  # no budget: NaN still fails
    assert not OutputScore("amount", nan, 0.01).passed
    assert "non-finite" in OutputScore("amount", nan, 0.01).describe()
    (result,) = check_budgets(
        Budgets(max_accuracy_loss=0.01), size_mb=1, latency_ms=1, loss=None, losses={"y": math.nan}
    )
    assert not result.passed
    with pytest.raises(OptimizeError, match="non-finite number at accuracy/loss"):
        validate_report({"accuracy": {"loss": math.nan}})


def _quick() -> Any:
    from servinglib.optimize.measure import MeasureSettings

    return MeasureSettings(warmup=1, iterations=5, repeats=2, batch_size=4, min_round_s=0.0)


def test_integer_outputs_are_judged_by_exact_agreement() -> None:
    from servinglib.optimize.accuracy import evaluate
    from servinglib.optimize.metric_choice import choose_metric

    digits = [np.array([[3]]), np.array([[7]]), np.array([[1]]), np.array([[0]])]
    metric, why = choose_metric("auto", digits, labels=None, output="digit")
    assert metric == "exact"
    assert "integers" in why
    moved = [*digits[:3], np.array([[9]])]
    result = evaluate("exact", reference=digits, candidate=moved)
    assert (result.value, result.loss, result.detail["disagreements"]) == (0.75, 0.25, 1.0)


def test_per_output_budgets_in_servinglib_yaml(tmp_path: Path) -> None:
    from servinglib.config.spec import load_config
    from servinglib.errors import ConfigError
    from servinglib.optimize.budgets import budgets_for_model

    (tmp_path / "models" / "m" / "1").mkdir(parents=True)
    config = tmp_path / "servinglib.yaml"
    config.write_text(
        "service: demo\nmodels:\n  - name: m\n    runtime: onnx\n"
        "    repository: models/m\n    default_version: '1'\n"
        "    optimize_budgets: {max_accuracy_loss: {class_logits: 0.003, amount: 0.02}}\n"
    )
    budgets = budgets_for_model(load_config(config), "m")
    assert budgets.max_accuracy_loss is None
    assert dict(budgets.output_losses) == {"class_logits": 0.003, "amount": 0.02}
    merged = budgets.override(Budgets(max_accuracy_loss=0.01, output_losses=(("amount", 0.05),)))
    assert merged.max_accuracy_loss == 0.01
    assert dict(merged.output_losses) == {"class_logits": 0.003, "amount": 0.05}
    results = check_budgets(
        merged, size_mb=1, latency_ms=1, loss=None, losses={"class_logits": 0.001, "amount": 0.06}
    )
    assert [(r.budget, r.passed) for r in results] == [
        ("max_accuracy_loss[class_logits]", True),
        ("max_accuracy_loss[amount]", False),
    ]
    with pytest.raises(ConfigError, match=r"optimize_budgets\.max_accuracy_loss\.amount"):
        Budgets.from_mapping(
            {"max_accuracy_loss": {"amount": -1}}, key_path="models[0].optimize_budgets"
        )
