"""The gates a policy adds: drift, the model's own metrics, Prometheus queries.

Each is a pure function of the window's counts and of ``external``, the readings taken at
the evaluation (:mod:`servinglib.delivery.external`) and persisted with it, so the readout
replays them. ``external`` looks like::

    {"drift": {"baseline": {field: {"role", "reference", "live"}}, "candidate": {...}},
     "queries": {name: {"baseline": 0.1, "candidate": 0.3, "error": None}}}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from servinglib.config.rollout_gates import DriftGate, MetricGate, QueryGate
from servinglib.config.rollout_policy import RolloutPolicy, RolloutStep
from servinglib.delivery.evidence import Counts
from servinglib.delivery.statistics import chi_square_gof_p, mann_whitney_p, proportion_p
from servinglib.delivery.verdicts import UNKNOWN, WAIT, GateResult, rate, verdict
from servinglib.monitoring.drift.statistics import psi

__all__ = ["custom_gates", "drift_gate", "metric_gate", "query_gate"]

_IN_FLIGHT = 16  # hits a counter may be ahead of its requests (calls still answering)
_ROLES = {"input": {"feature"}, "output": {"output"}, "any": {"feature", "output"}}


def custom_gates(
    policy: RolloutPolicy,
    step: RolloutStep,
    base: Counts,
    cand: Counts,
    shadow: Counts,
    external: Mapping[str, Any],
) -> list[GateResult]:
    """The drift, metric and query gates of ``policy`` on one window; ``shadow``: the
    candidate's shadow copies, which its model code counts in its metrics too."""
    enough = cand.requests >= step.min_requests
    results = []
    if policy.drift is not None:
        results.append(drift_gate(policy.drift, policy.alpha, external.get("drift", {})))
    for gate in policy.metrics:
        results.append(metric_gate(gate, policy.alpha, base, cand, enough, shadow.requests))
    for query in policy.queries:
        results.append(query_gate(query, external.get("queries", {}).get(query.name), enough))
    return results


def _field_psi(fields: Mapping[str, Any] | None, name: str) -> float:
    field = (fields or {}).get(name)
    score = None if field is None else psi(field["reference"], field["live"])
    return math.nan if score is None else score


def drift_gate(gate: DriftGate, alpha: float, readings: Mapping[str, Any]) -> GateResult:
    """The candidate's worst field: fails when its PSI is past the limit **and** a chi-square
    goodness-of-fit test finds its live bins unlike its profile (Bonferroni over fields)."""
    fields = readings.get("candidate")
    if fields is None:
        reason = f"no drift report for the candidate: {readings.get('error', 'no profile read')}"
        return GateResult("drift", UNKNOWN, math.nan, math.nan, gate.bound.value, 1.0, 0, reason)
    roles = _ROLES[gate.role]
    chosen = [
        name
        for name, f in fields.items()
        if f["role"] in roles and (not gate.fields or name in gate.fields)
    ]
    if not chosen:
        reason = f"no {gate.role} field {list(gate.fields) or ''} in the candidate's profile"
        return GateResult("drift", UNKNOWN, math.nan, math.nan, gate.bound.value, 1.0, 0, reason)
    per_field = []
    for name in chosen:
        score_c = _field_psi(fields, name)
        score_b = _field_psi(readings.get("baseline"), name) if gate.bound.relative else 0.0
        limit = gate.bound.limit(score_b)
        p = chi_square_gof_p(fields[name]["reference"], fields[name]["live"])
        per_field.append((score_c - limit, name, score_b, score_c, limit, p))
    failing = [f for f in per_field if f[0] > 0 and f[5] < alpha / len(chosen)]
    # Shown: the worst failing field, else the one nearest its limit (NaN: no answers yet).
    _, name, score_b, score_c, limit, p = max(
        failing or per_field, key=lambda f: -math.inf if math.isnan(f[0]) else f[0]
    )
    samples = min(sum(fields[n]["live"]) for n in chosen)
    enough = samples >= gate.min_samples and not any(math.isnan(f[0]) for f in per_field)
    outcome = verdict(bool(failing), enough)
    baseline = f", baseline {score_b:.3f}" if gate.bound.relative else ""
    reason = (
        f"{fields[name]['role']} {name!r}: PSI {score_c:.3f}{baseline}, limit {limit:.3f} "
        f"({gate.bound.describe()}); chi-square against the profile p={p:.3g} "
        f"(alpha {alpha / len(chosen):.3g} over {len(chosen)} fields); {samples} answers in "
        f"the drift window (min {gate.min_samples})"
    )
    return GateResult("drift", outcome, score_b, score_c, limit, p, samples, reason)


def _buckets(metrics: Mapping[str, float], name: str) -> dict[float, float]:
    prefix = f"{name}_bucket:"
    return {float(k[len(prefix) :]): v for k, v in metrics.items() if k.startswith(prefix)}


def _per_bucket(cumulative: Mapping[float, float], bounds: list[float]) -> list[float]:
    return Counts(buckets=dict(cumulative)).per_bucket(bounds)


def metric_gate(
    gate: MetricGate,
    alpha: float,
    base: Counts,
    cand: Counts,
    enough: bool,
    shadow_calls: int = 0,
) -> GateResult:
    """A counter per request (a share: Fisher / z / binomial) or a histogram's mean (a rank
    test on its buckets, and the means past the limit). ``shadow_calls``: the candidate's
    shadow copies in the window, requests its model code counted too."""
    if gate.histogram is not None:
        return _histogram_gate(gate, alpha, base, cand, enough)
    assert gate.counter is not None
    name, bound = f"metric:{gate.name}", gate.bound

    def counts(side: Counts, calls: int) -> tuple[int, int]:
        hits = int(side.metrics.get(f"{gate.counter}_total", 0.0))
        per = int(
            side.requests + calls
            if gate.per == "requests"
            else side.metrics.get(f"{gate.per}_total", 0.0)
        )
        # Calls in flight at the snapshot counted their hit but not yet their request.
        return (min(hits, per) if hits <= per + max(_IN_FLIGHT, per // 50) else hits), per

    (hits_b, total_b), (hits_c, total_c) = counts(base, 0), counts(cand, shadow_calls)
    rate_b, rate_c = rate(hits_b, total_b), rate(hits_c, total_c)
    if hits_c > total_c or hits_b > total_b:
        reason = (
            f"{gate.counter} counts more than {gate.per} ({hits_c}/{total_c} vs {hits_b}/"
            f"{total_b}): not a share; divide by a counter that counts every try (`per`)"
        )
        return GateResult(name, UNKNOWN, rate_b, rate_c, bound.value, 1.0, total_c, reason)
    # Test the share of "bad" events: the misses when higher is better.
    if bound.higher_is_better:
        bad_c, bad_b = total_c - hits_c, total_b - hits_b
        cap = None if bound.relative else 1.0 - bound.value
    else:
        bad_c, bad_b = hits_c, hits_b
        cap = None if bound.relative else bound.value
    p, test = proportion_p(
        bad_c, total_c, bad_b, total_b, cap, bound.value if bound.relative else 0
    )
    if bound.higher_is_better:
        test += " on the misses"
    failed = p < alpha
    limit = bound.limit(rate_b)
    reason = (
        f"{gate.counter} per {gate.per} {rate_c:.2%} ({hits_c}/{total_c}) vs baseline "
        f"{rate_b:.2%} ({hits_b}/{total_b}), {bound.describe()}: {test}, p={p:.3g} "
        + ("< " if failed else ">= ")
        + f"alpha {alpha:g}"
    )
    return GateResult(name, verdict(failed, enough), rate_b, rate_c, limit, p, total_c, reason)


def _histogram_gate(
    gate: MetricGate, alpha: float, base: Counts, cand: Counts, enough: bool
) -> GateResult:
    assert gate.histogram is not None
    name, bound, metric = f"metric:{gate.name}", gate.bound, gate.histogram
    n_b, n_c = (int(s.metrics.get(f"{metric}_count", 0.0)) for s in (base, cand))
    mean_b = rate(base.metrics.get(f"{metric}_sum", 0.0), n_b)
    mean_c = rate(cand.metrics.get(f"{metric}_sum", 0.0), n_c)
    if enough and (n_c == 0 or n_b == 0):
        reason = (
            f"histogram {metric!r} has no observations of the "
            f"{'candidate' if n_c == 0 else 'baseline'} after {cand.requests} candidate "
            "requests: does the model observe it (self.metrics.histogram(...).observe)?"
        )
        return GateResult(name, UNKNOWN, mean_b, mean_c, bound.value, 1.0, n_c, reason)
    cumulative_b, cumulative_c = _buckets(base.metrics, metric), _buckets(cand.metrics, metric)
    bounds = sorted(cumulative_b.keys() | cumulative_c.keys())
    per_b, per_c = _per_bucket(cumulative_b, bounds), _per_bucket(cumulative_c, bounds)
    # One-sided: is the candidate's distribution shifted the harmful way?
    p = mann_whitney_p(per_c, per_b) if bound.higher_is_better else mann_whitney_p(per_b, per_c)
    limit = bound.limit(mean_b)
    failed = p < alpha and not math.isnan(mean_c) and bound.worse(mean_c, mean_b)
    reason = (
        f"mean {metric} {mean_c:.4g} ({n_c} observations) vs baseline {mean_b:.4g} ({n_b}), "
        f"limit {limit:.4g} ({bound.describe()}); Mann-Whitney on the buckets p={p:.3g}"
    )
    return GateResult(
        name, verdict(failed, enough and n_c > 0), mean_b, mean_c, limit, p, n_c, reason
    )


def query_gate(gate: QueryGate, reading: Mapping[str, Any] | None, enough: bool) -> GateResult:
    """A Prometheus query's value for the candidate against the limit (no test: the query
    aggregates its own window). A failed query is unknown (the rollout pauses); an empty
    result waits: either way the step cannot pass without the evidence."""
    name, bound = f"prometheus:{gate.name}", gate.bound
    reading = reading or {"error": "not queried"}
    value_b, value_c = reading.get("baseline"), reading.get("candidate")
    if reading.get("error"):
        reason = f"query failed: {reading['error']}"
        return GateResult(name, UNKNOWN, math.nan, math.nan, bound.value, math.nan, 0, reason)
    if value_c is None or (bound.relative and value_b is None):
        empty = "candidate" if value_c is None else "baseline"
        reason = f"no series for the {empty} yet (not scraped yet, or a query that matches none)"
        base = math.nan if value_b is None else float(value_b)
        cand = math.nan if value_c is None else float(value_c)
        return GateResult(name, WAIT, base, cand, bound.value, math.nan, 0, reason)
    base = math.nan if value_b is None else float(value_b)
    cand = float(value_c)
    failed = bound.worse(cand, base if bound.relative else 0.0)
    limit = bound.limit(base if bound.relative else 0.0)
    reason = f"{cand:.4g} vs baseline {base:.4g}, limit {limit:.4g} ({bound.describe()})" + (
        ": past the limit" if failed else ""
    )
    return GateResult(name, verdict(failed, enough), base, cand, limit, math.nan, 1, reason)
