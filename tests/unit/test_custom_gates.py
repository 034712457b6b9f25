"""The drift, model-metric and Prometheus gates on hand-made windows."""

from __future__ import annotations

import math

from servinglib.config.rollout_gates import Bound, DriftGate, MetricGate, QueryGate
from servinglib.delivery.custom_gates import drift_gate, metric_gate, query_gate
from servinglib.delivery.evidence import Counts
from servinglib.delivery.statistics import chi_square_gof_p, chi_square_sf

UNIFORM = [0.1] * 10


def test_chi_square_tail_matches_the_tables() -> None:
    # 95th percentiles of chi-square with 1, 9 and 30 degrees of freedom (any table).
    assert math.isclose(chi_square_sf(3.841459, 1), 0.05, rel_tol=1e-5)
    assert math.isclose(chi_square_sf(16.918978, 9), 0.05, rel_tol=1e-5)
    assert math.isclose(chi_square_sf(43.772972, 30), 0.05, rel_tol=1e-5)
    assert chi_square_sf(0.0, 3) == 1.0


def test_the_goodness_of_fit_test_tells_noise_from_drift() -> None:
    assert chi_square_gof_p(UNIFORM, [10, 9, 11, 10, 10, 12, 8, 10, 10, 10]) > 0.9
    assert chi_square_gof_p(UNIFORM, [46, 12, 9, 7, 6, 5, 5, 4, 3, 3]) < 1e-9
    assert chi_square_gof_p([0.5, 0.5, 0.0], [5, 5, 1]) == 0.0  # a bin the reference never saw


def _drift(live_c: list[int], live_b: list[int]) -> dict[str, object]:
    def side(live: list[int]) -> dict[str, object]:
        return {"score": {"role": "output", "reference": UNIFORM, "live": live}}

    return {"baseline": side(live_b), "candidate": side(live_c)}


def test_the_drift_gate_fails_on_significant_drift_past_the_baseline() -> None:
    gate = DriftGate("output", (), Bound("max_increase", 0.1), 100)
    even = [20] * 10
    skewed = [92, 24, 18, 14, 12, 10, 10, 8, 6, 6]
    result = drift_gate(gate, 0.01, _drift(skewed, even))
    assert result.verdict == "fail", result.reason
    assert result.candidate > 0.5 > result.threshold
    assert result.reason.startswith("output 'score': PSI")
    assert drift_gate(gate, 0.01, _drift(even, even)).verdict == "pass"
    # A large PSI on a handful of answers is no evidence: it waits.
    few = drift_gate(gate, 0.01, _drift([2, 0, 1, 0, 0, 0, 0, 0, 0, 0], even))
    assert few.verdict == "wait", few.reason
    # The same drift in the baseline (the traffic changed, not the model) passes.
    assert drift_gate(gate, 0.01, _drift(skewed, skewed)).verdict == "pass"
    missing = drift_gate(gate, 0.01, {"baseline": None, "candidate": None})
    assert missing.verdict == "unknown"


def _counts(requests: int, **metrics: float) -> Counts:
    return Counts(requests=requests, metrics=dict(metrics))


def test_a_counter_share_gate_uses_the_test_its_threshold_asks_for() -> None:
    base = _counts(400, offers_accepted_total=240)  # 60 %
    worse = _counts(400, offers_accepted_total=180)  # 45 %
    same = _counts(400, offers_accepted_total=236)
    relative = MetricGate("a", "offers_accepted", "requests", None, Bound("max_decrease", 0.05))
    fisher = MetricGate("a", "offers_accepted", "requests", None, Bound("max_decrease", 0.0))
    absolute = MetricGate("a", "offers_accepted", "requests", None, Bound("min", 0.55))
    failed = metric_gate(relative, 0.0025, base, worse, True)
    assert failed.verdict == "fail", failed.reason
    assert "two-proportion z-test, margin 0.05 on the misses" in failed.reason
    assert metric_gate(relative, 0.0025, base, same, True).verdict == "pass"
    assert "Fisher" in metric_gate(fisher, 0.0025, base, worse, True).reason
    assert metric_gate(fisher, 0.0025, base, worse, True).verdict == "fail"
    floor = metric_gate(absolute, 0.0025, base, worse, True)
    assert floor.verdict == "fail"
    assert "binomial" in floor.reason, floor.reason
    # Shadow copies ran the candidate's code too: they count in its denominator.
    shadowed = metric_gate(
        relative, 0.0025, base, _counts(100, offers_accepted_total=240), True, 300
    )
    assert shadowed.verdict == "pass", shadowed.reason
    # More hits than requests is not a share: unknown, never a verdict on it.
    per_offer = MetricGate("a", "offers_accepted", "offers", None, Bound("max", 0.5))
    odd = metric_gate(
        per_offer, 0.0025, base, _counts(100, offers_accepted_total=90, offers_total=30), True
    )
    assert odd.verdict == "unknown"
    assert "not a share" in odd.reason


def _histogram(counts: list[int], bounds: list[float]) -> dict[str, float]:
    metrics, running, total = {}, 0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        running += count
        metrics[f"basket_eur_bucket:{bound}"] = float(running)
        total += count * (bound - 2.5) if count else 0.0
    metrics["basket_eur_count"] = float(running)
    metrics["basket_eur_sum"] = total
    return metrics


def test_a_histogram_gate_needs_a_shifted_distribution_and_a_mean_past_the_limit() -> None:
    bounds = [10.0, 20.0, 25.0, 30.0, 35.0, 40.0, math.inf]
    base = Counts(requests=300, metrics=_histogram([0, 50, 75, 75, 50, 50, 0], bounds))
    lower = Counts(requests=300, metrics=_histogram([40, 90, 70, 50, 30, 20, 0], bounds))
    gate = MetricGate("basket", None, "requests", "basket_eur", Bound("max_decrease", 2.0))
    failed = metric_gate(gate, 0.0025, base, lower, True)
    assert failed.verdict == "fail", failed.reason
    assert "Mann-Whitney" in failed.reason
    assert metric_gate(gate, 0.0025, base, base, True).verdict == "pass"
    # Lower by more than 2 but on 5 observations: no evidence yet.
    tiny = Counts(requests=5, metrics=_histogram([0, 2, 1, 1, 1, 0, 0], bounds))
    assert metric_gate(gate, 0.0025, base, tiny, False).verdict == "wait"
    silent = metric_gate(gate, 0.0025, base, Counts(requests=300), True)
    assert silent.verdict == "unknown"
    assert "no observations" in silent.reason


def test_a_query_gate_is_unknown_on_errors_and_waits_for_series() -> None:
    gate = QueryGate(
        "q", "http://p:9090", 'x{version="{{version}}"}', Bound("max_increase", 0.1), 5
    )
    down = query_gate(gate, {"error": "http://p:9090: refused"}, True)
    assert down.verdict == "unknown"
    assert "refused" in down.reason
    empty = query_gate(gate, {"baseline": 0.2, "candidate": None, "error": None}, True)
    assert empty.verdict == "wait"
    past = query_gate(gate, {"baseline": 0.2, "candidate": 0.31, "error": None}, False)
    assert past.verdict == "fail"
    assert past.threshold == 0.2 + 0.1
    assert (
        query_gate(gate, {"baseline": 0.2, "candidate": 0.29, "error": None}, True).verdict
        == "pass"
    )
