"""The warnings of an optimize run: batch dependence, CPU, essentially FP32, noisy rounds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servinglib.optimize.compare import ROUND_SPREAD_WARNING, round_spread
from servinglib.optimize.measure import CpuInfo
from servinglib.optimize.weights import ESSENTIALLY_FP32

if TYPE_CHECKING:
    from servinglib.optimize._settings import OptimizeSettings
    from servinglib.optimize.report import ModelFigures
    from servinglib.optimize.search import SearchResult

__all__ = ["run_warnings"]


def run_warnings(
    baseline: ModelFigures,
    optimized: ModelFigures | None,
    search: SearchResult,
    cpu: CpuInfo,
    settings: OptimizeSettings,
) -> list[str]:
    """Every warning the report states, each with what to do about it."""
    found = []
    if optimized is not None and not optimized.invariance.invariant:
        found.append(
            f"the INT8 model is not batch-invariant: served in a batch, a request's output "
            f"moves by up to {optimized.invariance.worst_relative:.3g} (relative) compared "
            f"with served alone (tolerance {settings.invariance_tolerance:g}); with dynamic "
            "batching prefer a batch-invariant method (dynamic-per-token or static)"
        )
    if not cpu.vnni:
        found.append(
            "this CPU has no VNNI: u8xs8 INT8 kernels may saturate and run slower; "
            "consider --reduce-range"
        )
    fp32_invariance = search.fp32_invariance or baseline.invariance
    if not fp32_invariance.invariant:
        found.append(
            f"the FP32 model itself is not batch-invariant (worst deviation "
            f"{fp32_invariance.worst_relative:.3g} > {settings.invariance_tolerance:g}): "
            "candidates were not blamed for it; their deviation is judged on top of it"
        )
    chosen = search.chosen
    if chosen is not None and chosen.weights is not None and chosen.weights.essentially_fp32:
        found.append(
            f"the result is essentially FP32: {chosen.weights.describe()} (less than "
            f"{ESSENTIALLY_FP32:.0%}); ONNX Runtime has no INT8 kernel these operators take "
            "with this method: expect little gain beyond the size figure"
        )
    measured = [
        ("latency p50", "FP32", baseline.latency.rounds_p50_ms),
        ("latency p95", "FP32", baseline.latency.rounds_p95_ms),
        ("throughput", "FP32", baseline.throughput.rounds_samples_per_s),
    ]
    if optimized is not None:
        measured.append(("latency p50", "INT8", optimized.latency.rounds_p50_ms))
        measured.append(("latency p95", "INT8", optimized.latency.rounds_p95_ms))
        measured.append(("throughput", "INT8", optimized.throughput.rounds_samples_per_s))
    measured += [
        ("latency p50", c.name, c.latency.rounds_p50_ms) for c in search.candidates if c.latency
    ]
    for figure, name, rounds in measured:
        spread = round_spread(rounds)
        if spread > ROUND_SPREAD_WARNING:
            found.append(
                f"{figure} rounds of {name} differ by {spread:.0%} (more than "
                f"{ROUND_SPREAD_WARNING:.0%}): the machine was busy or throttling; rerun on "
                f"a quiet machine or raise --repeats before trusting the {figure} figures"
            )
    return found
