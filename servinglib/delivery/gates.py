"""Gates: each compares baseline and candidate over one window: fail, pass, wait or unknown.

A gate **fails** only when its one-sided test rejects "the candidate is no worse" at the
policy's ``alpha`` (and, for latency, the measured ratio is also past the threshold: a
significant but harmless shift does not roll back). It **passes** once the step has its
minimum of candidate requests without failing. Otherwise it **waits** for evidence, or is
**unknown** when the evidence cannot be read (the controller pauses the rollout).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from servinglib.config.rollout_policy import RolloutPolicy, RolloutStep
from servinglib.delivery.custom_gates import custom_gates
from servinglib.delivery.evidence import Counts
from servinglib.delivery.statistics import (
    binomial_lower_p,
    histogram_quantile,
    mann_whitney_p,
    proportion_p,
    rescale,
)
from servinglib.delivery.verdicts import FAIL, PASS, UNKNOWN, WAIT, GateResult, rate, verdict

__all__ = [
    "FAIL",
    "LOOKS_PER_STEP",
    "PASS",
    "UNKNOWN",
    "WAIT",
    "GateResult",
    "evaluate_gates",
    "look_due",
]

# A gate may fail a step only at a look: when the candidate's requests reach each quarter
# of the step's min_requests (and every quarter after). Each look tests at alpha / 4
# (Bonferroni), so peeking at the data as it comes in does not inflate the false-rollback
# rate of a step above alpha (docs/explanation/progressive-delivery.md).
LOOKS_PER_STEP = 4


def look_due(step: RolloutStep, samples: int, looks: int) -> int:
    """The look number ``samples`` reaches (> ``looks``: a look is due now)."""
    quarter = max(1, -(-step.min_requests // LOOKS_PER_STEP))
    return samples // quarter


def error_gate(policy: RolloutPolicy, step: RolloutStep, base: Counts, cand: Counts) -> GateResult:
    """Failed predictions of the candidate against the baseline's (or an absolute cap)."""
    gate = policy.error_rate
    assert gate is not None
    rate_b, rate_c = rate(base.failed, base.requests), rate(cand.failed, cand.requests)
    threshold = gate.max if gate.max is not None else gate.max_increase or 0.0
    p, test = proportion_p(
        cand.failed, cand.requests, base.failed, base.requests, gate.max, gate.max_increase or 0.0
    )
    failed = p < policy.alpha
    outcome = verdict(failed, cand.requests >= step.min_requests)
    reason = (
        f"error rate {rate_c:.2%} ({cand.failed}/{cand.requests}) vs baseline {rate_b:.2%} "
        f"({base.failed}/{base.requests}): {test}, p={p:.3g} "
        + ("< " if failed else ">= ")
        + f"alpha {policy.alpha:g}"
    )
    return GateResult("error_rate", outcome, rate_b, rate_c, threshold, p, cand.requests, reason)


def latency_gate(
    policy: RolloutPolicy, step: RolloutStep, base: Counts, cand: Counts, bounds: list[float]
) -> GateResult:
    """The candidate's latency quantile against the baseline's, by a rank test."""
    gate = policy.latency
    assert gate is not None
    per_b, per_c = base.per_bucket(bounds), cand.per_bucket(bounds)
    q_b = histogram_quantile(gate.quantile, bounds, per_b)
    q_c = histogram_quantile(gate.quantile, bounds, per_c)
    ratio = q_c / q_b if q_b > 0 else math.nan
    # H0: the candidate is at most max_ratio times slower: the baseline scaled by max_ratio
    # is what the candidate may be; the test asks whether it is significantly above that.
    p = mann_whitney_p(rescale(bounds, per_b, gate.max_ratio), per_c)
    failed = p < policy.alpha and ratio > gate.max_ratio
    outcome = verdict(failed, cand.requests >= step.min_requests)
    name = f"p{round(gate.quantile * 100)}"
    reason = (
        f"{name} {q_c * 1000:.1f} ms vs baseline {q_b * 1000:.1f} ms (ratio {ratio:.2f}, "
        f"max {gate.max_ratio:g}); Mann-Whitney against {gate.max_ratio:g} x baseline p={p:.3g}"
    )
    return GateResult("latency", outcome, q_b, q_c, gate.max_ratio, p, cand.requests, reason)


def agreement_gate(policy: RolloutPolicy, step: RolloutStep, shadow: Counts) -> GateResult:
    """The share of the candidate's shadow answers that agree with the baseline's."""
    minimum = policy.shadow_agreement
    assert minimum is not None
    share = rate(shadow.agreements, shadow.comparisons)
    p = binomial_lower_p(shadow.agreements, shadow.comparisons, minimum)
    failed = p < policy.alpha
    outcome = verdict(failed, shadow.comparisons >= step.min_requests)
    reason = (
        f"agreement {share:.2%} ({shadow.agreements}/{shadow.comparisons}) vs min "
        f"{minimum:.2%}: exact binomial test p={p:.3g}"
    )
    return GateResult(
        "shadow_agreement", outcome, 1.0, share, minimum, p, shadow.comparisons, reason
    )


def evaluate_gates(
    policy: RolloutPolicy,
    step: RolloutStep,
    base: Counts,
    cand: Counts,
    shadow: Counts,
    bounds: list[float],
    look: bool = True,
    external: Mapping[str, Any] | None = None,
) -> list[GateResult]:
    """Every gate that applies to ``step``: traffic gates on a weighted step (with drift,
    model metrics and Prometheus queries, their readings in ``external``), the agreement
    gate whenever the candidate is shadowed (a shadow step has only that one).

    Each test runs at ``alpha / LOOKS_PER_STEP``; between looks (``look`` false) a gate
    that would fail waits for the next look.
    """
    policy = replace(policy, alpha=policy.alpha / LOOKS_PER_STEP)
    results = []
    if not step.shadow:
        if policy.error_rate is not None:
            results.append(error_gate(policy, step, base, cand))
        if policy.latency is not None:
            results.append(latency_gate(policy, step, base, cand, bounds))
        results.extend(custom_gates(policy, step, base, cand, shadow, external or {}))
    if policy.shadow_agreement is not None and (step.shadow or shadow.comparisons):
        results.append(agreement_gate(policy, step, shadow))
    if look:
        return results
    return [
        replace(r, verdict=WAIT, reason=f"{r.reason} (next look pending)")
        if r.verdict == FAIL
        else r
        for r in results
    ]
