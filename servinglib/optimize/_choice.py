"""Which candidates to try, and which accepted one to keep.

The candidates are the methods that apply to the graph (per-token only with MatMul/Gemm,
static only with calibration samples).
Candidates whose rounds cannot be told apart from the fastest median
(:mod:`servinglib.optimize.compare`) are tied; among them batch-invariant wins, then smaller,
then less lossy (relative to its budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from servinglib.optimize._per_token import PER_TOKEN_OP_TYPES
from servinglib.optimize.compare import Comparison, compare_rounds
from servinglib.optimize.graph import count_ops
from servinglib.optimize.quantize import QuantizeOptions

if TYPE_CHECKING:
    from servinglib.optimize.search import CandidateResult

__all__ = ["auto_candidates", "pick_candidate"]


def auto_candidates(model: Path, has_calibration: bool) -> list[QuantizeOptions]:
    """The base candidates that apply to the graph at ``model``."""
    ops = count_ops(model)
    candidates = [
        QuantizeOptions(method="dynamic"),
        QuantizeOptions(method="dynamic", per_channel=True),
    ]
    if any(ops[op] for op in PER_TOKEN_OP_TYPES):
        candidates.append(QuantizeOptions(method="dynamic-per-token", per_channel=True))
    if has_calibration:
        candidates += [
            QuantizeOptions(method="static"),
            QuantizeOptions(method="static", per_channel=True),
        ]
    return candidates


def pick_candidate(accepted: Sequence[CandidateResult]) -> tuple[CandidateResult, str]:
    """The accepted candidate to keep (latencies measured), and why.

    Candidates whose rounds cannot be told apart from the fastest median are tied; among
    them batch-invariant wins, then smaller, then less lossy.
    """
    fastest = min(accepted, key=lambda c: c.latency.p50_ms if c.latency else np.inf)
    tied = []
    for candidate in accepted:
        if candidate is fastest:
            candidate.comparison = "fastest median"
            tied.append(candidate)
            continue
        verdict = _compare(candidate, fastest)
        candidate.comparison = verdict.describe(fastest.name)
        if verdict.faster is not False:
            tied.append(candidate)
    chosen = min(tied, key=_tie_key)
    if len(tied) == 1:
        return chosen, "measurably faster than every other accepted candidate"
    names = ", ".join(c.name for c in tied)
    return chosen, (
        f"latency cannot tell apart {names}; among them preferred batch-invariant, then "
        "smaller, then less lossy"
    )


def _compare(a: CandidateResult, b: CandidateResult) -> Comparison:
    assert a.latency is not None
    assert b.latency is not None
    return compare_rounds(a.latency.rounds_p50_ms, b.latency.rounds_p50_ms)


def _tie_key(c: CandidateResult) -> tuple[bool, float, float, float]:
    variant = not (c.invariance is not None and c.invariance.invariant)
    return (
        variant,
        c.size_mb or 0.0,
        c.pressure,
        c.latency.p50_ms if c.latency else np.inf,
    )
