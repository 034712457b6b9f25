"""Sections of the optimize report computed from the figures: claims, INT8 share, tolerance.

Also the strict-JSON helpers: a report holds no NaN or infinity (written as null), and a
document that does is refused by the validator, naming where.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from servinglib.optimize.compare import SpeedClaim, speed_claim
from servinglib.optimize.weights import WeightShare

if TYPE_CHECKING:
    from servinglib.optimize.report import ModelFigures

__all__ = [
    "claims",
    "finite",
    "non_finite",
    "quantization",
    "selftest_tolerance",
    "suggested_atol",
]


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None: strict JSON has neither."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def quantization(weights: WeightShare | None) -> dict[str, Any] | None:
    if weights is None:
        return None
    return {
        "weights_int8_share": weights.quantized_fraction,
        "int8_weight_elements": weights.quantized_elements,
        "float_weight_elements": weights.float_elements,
        "float_op_types": dict(weights.float_op_types),
        "essentially_fp32": weights.essentially_fp32,
    }


def suggested_atol(optimized: ModelFigures) -> float:
    """An ``atol`` covering INT8's largest deviation from FP32, alone or batched, with margin."""
    worst = max(optimized.max_abs_diff_fp32, optimized.invariance.worst_absolute)
    if worst <= 0:
        return 1e-5
    # 1.5x the worst deviation seen, rounded up to two significant digits
    digits = math.floor(math.log10(worst * 1.5)) - 1
    return float(round(math.ceil(worst * 1.5 / 10**digits) * 10**digits, -digits))


def selftest_tolerance(optimized: ModelFigures | None) -> dict[str, Any] | None:
    if optimized is None:
        return None
    return {
        "atol": suggested_atol(optimized),
        "rtol": 0.0,
        "max_abs_diff_fp32": optimized.max_abs_diff_fp32,
        "max_abs_batch_deviation": optimized.invariance.worst_absolute,
        "why": "self-test expectations taken from the FP32 model: the INT8 outputs differ "
        "from them by up to max_abs_diff_fp32 alone and move by up to "
        "max_abs_batch_deviation inside a batch; give each case of test_data.json "
        '"tolerance": {"atol": <atol>} (1.5x the larger, two digits)',
    }


def claims(baseline: ModelFigures, optimized: ModelFigures | None) -> list[SpeedClaim]:
    if optimized is None:
        return []

    def per_sample(rounds: tuple[float, ...]) -> list[float]:
        return [1.0 / r if r > 0 else math.inf for r in rounds]

    return [
        speed_claim("p50", baseline.latency.rounds_p50_ms, optimized.latency.rounds_p50_ms),
        speed_claim("p95", baseline.latency.rounds_p95_ms, optimized.latency.rounds_p95_ms),
        speed_claim(
            "throughput",
            per_sample(baseline.throughput.rounds_samples_per_s),
            per_sample(optimized.throughput.rounds_samples_per_s),
        ),
    ]


def non_finite(value: Any, path: str) -> str | None:
    """The JSON path of the first NaN or infinity in ``value``, None when there is none."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        found = non_finite(item, f"{path}/{key}" if path else str(key))
        if found is not None:
            return found
    return None
