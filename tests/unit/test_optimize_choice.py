"""Choosing on evidence: paired rounds, ties broken by invariance then size; metrics by output."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from servinglib.optimize.accuracy import evaluate
from servinglib.optimize.compare import compare_rounds, round_spread
from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.invariance import InvarianceResult
from servinglib.optimize.measure import LatencyStats
from servinglib.optimize.metric_choice import choose_metric
from servinglib.optimize.quantize import QuantizeOptions
from servinglib.optimize.samples import load_labels
from servinglib.optimize.search import CandidateResult, pick_candidate


def test_five_paired_rounds_all_won_by_3_percent_or_more_are_faster() -> None:
    a, b = [1.0, 1.1, 0.9, 1.0, 1.05], [1.2, 1.3, 1.1, 1.25, 1.2]
    assert compare_rounds(a, b).faster is True
    assert compare_rounds(b, a).faster is False
    assert "faster than" in compare_rounds(a, b).describe("dynamic")


@pytest.mark.parametrize(
    ("a", "b", "why"),
    [
        ([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], "three rounds can never reach 5 %"),
        ([1.0, 1.0, 1.0, 1.0, 1.3], [1.1, 1.1, 1.1, 1.1, 1.0], "won 4 of 5"),
        ([1.00, 1.00, 1.00, 1.00, 1.00], [1.01, 1.01, 1.01, 1.01, 1.01], "1 % is no effect"),
    ],
)
def test_noise_is_indistinguishable(a: list[float], b: list[float], why: str) -> None:
    verdict = compare_rounds(a, b)
    assert verdict.faster is None, why
    assert "indistinguishable" in verdict.describe("y")


def test_unsteady_rounds_cannot_tell_candidates_apart() -> None:
    """A busy machine can favour one model in every round: two runs of the digits search
    chose static, then static per-channel (5 of 5 rounds by 5 %, rounds spread by 52 %)."""
    steady = [1.00, 1.01, 1.00, 0.99, 1.00]
    busy = [1.06, 1.40, 1.05, 1.55, 1.07]  # each round slower, spread 47 %
    verdict = compare_rounds(steady, busy)
    assert verdict.wins == 5
    assert verdict.faster is None
    assert "rounds spread by 47%: a busy machine, only a larger difference counts" in (
        verdict.describe("x")
    )
    assert compare_rounds(busy, steady).faster is None
    calm = [1.06, 1.08, 1.05, 1.07, 1.07]
    assert compare_rounds(steady, calm).faster is True
    # a difference larger than the spread still shows through, either way round
    three_times = [3 * r for r in busy]
    assert compare_rounds(steady, three_times).faster is True
    assert compare_rounds(three_times, steady).faster is False
    half = [0.5 * r for r in busy]  # 2x faster than steady: 100 % > 47 %
    assert compare_rounds(half, steady).faster is True


def test_round_spread() -> None:
    assert round_spread([1.0, 1.0, 1.0]) == 0.0
    assert round_spread([0.9, 1.0, 1.4]) == pytest.approx(0.5)


def candidate(name: str, rounds: list[float], *, invariant: bool, size: float) -> CandidateResult:
    inv = InvarianceResult(8, 4, 1e-3, 0.0 if invariant else 0.02, 0.0, 0, 10, 0)
    latency = LatencyStats(float(np.median(rounds)), 0.0, tuple(rounds), tuple(rounds))
    return CandidateResult(
        name, QuantizeOptions(), size_mb=size, invariance=inv, latency=latency, accepted=True
    )


def test_ties_go_to_batch_invariant_then_smaller() -> None:
    noisy_fast = candidate("dynamic", [1.00, 1.30, 0.95, 1.20, 0.98], invariant=False, size=1.0)
    static = candidate("static", [1.02, 1.00, 1.10, 1.00, 1.05], invariant=True, size=1.2)
    smaller = candidate("static small", [1.05, 1.01, 1.00, 1.10, 1.02], invariant=True, size=1.1)
    chosen, reason = pick_candidate([noisy_fast, static, smaller])
    assert chosen is smaller
    assert "cannot tell apart" in reason
    assert noisy_fast.comparison == "fastest median"
    assert static.comparison is not None
    assert "indistinguishable" in static.comparison


def test_a_measurably_faster_candidate_wins_over_invariance() -> None:
    fast = candidate("dynamic", [0.50, 0.52, 0.49, 0.51, 0.50], invariant=False, size=1.0)
    slow = candidate("static", [1.00, 1.01, 0.99, 1.02, 1.00], invariant=True, size=0.9)
    chosen, reason = pick_candidate([slow, fast])
    assert chosen is fast
    assert reason == "measurably faster than every other accepted candidate"
    assert slow.comparison is not None
    assert slow.comparison.startswith("slower than dynamic")


@pytest.mark.parametrize(
    ("outputs", "labels", "output", "expected"),
    [
        ([np.array([[312.0]]), np.array([[95.0]])], None, "eta", "relative-error"),
        ([np.array([[0.1, 2.0, -1.0]])] * 2, np.array([1, 1]), "out", "top1"),
        ([np.array([[0.1, 2.0, -1.0]])] * 2, None, "logits", "top1"),
        ([np.array([[0.6, 0.8]])] * 2, None, "sentence_embedding", "cosine"),
        ([np.array([[0.6, 0.8]])] * 2, None, "y", "cosine"),
        ([np.array([[0.2, 0.8]])] * 2, None, "y", "top1"),
        ([np.array([[3.0, 40.0]])] * 2, None, "y", "relative-error"),
    ],
)
def test_auto_metric_follows_the_output(
    outputs: list[np.ndarray], labels: np.ndarray | None, output: str, expected: str
) -> None:
    metric, why = choose_metric("auto", outputs, labels=labels, output=output)
    assert metric == expected
    assert why
    assert choose_metric("cosine", outputs, labels=None, output=output)[0] == "cosine"


def test_relative_error_sees_scalar_errors_that_cosine_cannot() -> None:
    rng = np.random.default_rng(0)
    reference = [np.array([[v]]) for v in rng.uniform(100, 900, 50)]
    scrambled = [np.array([[v]]) for v in rng.uniform(100, 900, 50)]
    assert evaluate("cosine", reference=reference, candidate=scrambled).loss == pytest.approx(0)
    result = evaluate("relative-error", reference=reference, candidate=scrambled)
    assert result.loss > 0.5
    assert result.detail["rank_correlation"] < 0.5
    same = evaluate("relative-error", reference=reference, candidate=reference)
    assert same.loss == 0.0


def test_top1_reports_accuracy_when_labels_are_given() -> None:
    reference = [np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]])]
    candidate_outputs = [np.array([[0.0, 1.0]]), np.array([[0.0, 1.0]])]
    result = evaluate(
        "top1", reference=reference, candidate=candidate_outputs, labels=np.array([1, 0])
    )
    assert result.value == 0.5
    assert result.detail["accuracy"] == 0.5
    assert result.detail["accuracy_fp32"] == 1.0


def test_a_user_metric_is_called_with_outputs_and_labels(tmp_path: Path) -> None:
    (tmp_path / "eta_metrics.py").write_text(
        "import numpy as np\n"
        "def late_share(reference, candidate, labels):\n"
        "    return float(np.mean([c.item() > r.item() + 60 for r, c in zip(reference, candidate)]))\n"
        "def broken(reference, candidate, labels):\n"
        "    return 'bad'\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        reference = [np.array([[100.0]]), np.array([[200.0]])]
        late = [np.array([[100.0]]), np.array([[300.0]])]
        result = evaluate("eta_metrics:late_share", reference=reference, candidate=late)
        assert result.loss == 0.5
        with pytest.raises(OptimizeError, match="returned 'bad'; return the loss as a float"):
            evaluate("eta_metrics:broken", reference=reference, candidate=late)
        with pytest.raises(OptimizeError, match="eta_metrics:missing"):
            evaluate("eta_metrics:missing", reference=reference, candidate=late)
    finally:
        sys.path.remove(str(tmp_path))
        # Another test writes its own eta_metrics.py: never reuse this one.
        sys.modules.pop("eta_metrics", None)


def test_labels_files(tmp_path: Path) -> None:
    np.save(tmp_path / "labels.npy", np.array([3, 1, 2]))
    (tmp_path / "labels.txt").write_text("3\n1\n2\n")
    assert load_labels(tmp_path / "labels.npy", 2).tolist() == [3, 1]
    assert load_labels(tmp_path / "labels.txt", 3).tolist() == [3, 1, 2]
    with pytest.raises(OptimizeError, match="3 labels for 4 validation samples"):
        load_labels(tmp_path / "labels.txt", 4)


def test_the_report_warns_when_rounds_differ_a_lot() -> None:
    from servinglib.optimize._run_warnings import run_warnings as _warnings
    from servinglib.optimize.measure import ThroughputStats, cpu_info
    from servinglib.optimize.pipeline import OptimizeSettings
    from servinglib.optimize.report import ModelFigures
    from servinglib.optimize.search import SearchResult

    steady = candidate("static", [1.00, 1.02, 0.99, 1.01, 1.00], invariant=True, size=1.0)
    noisy = candidate("dynamic", [1.00, 1.60, 0.95, 1.30, 1.00], invariant=True, size=1.0)
    assert steady.latency is not None
    assert steady.invariance is not None
    figures = ModelFigures(
        Path("m.onnx"),
        1.0,
        steady.latency,
        ThroughputStats(4, 100.0, (100.0,)),
        1.0,
        steady.invariance,
    )
    search = SearchResult([steady, noisy], steady, [])
    found = _warnings(figures, figures, search, cpu_info("flags: avx512_vnni"), OptimizeSettings())
    spread = [w for w in found if "latency p50 rounds" in w]
    assert len(spread) == 1
    assert spread[0].startswith("latency p50 rounds of dynamic differ by 65% (more than 25%)")
