"""Accuracy metrics that compare an optimized model with its FP32 original.

Each metric gives a value and a *loss* (how much worse than the original, ≥ 0 is worse):

=================  =================================================  ===========================
metric             value                                              loss
=================  =================================================  ===========================
``accuracy``       share of argmax predictions equal to the labels    FP32 accuracy - value
``top1``           share of argmax predictions equal to FP32's        1 - value
``cosine``         mean cosine similarity of outputs with FP32's      1 - value
``max-abs-error``  largest absolute difference from FP32's outputs    value
=================  =================================================  ===========================

Losses are fractions: 0.003 is 0.3 percentage points of accuracy. Outputs are compared per
sample (one array of shape ``[1, ...]`` each); argmax is over the last axis.

Example::

    result = evaluate("cosine", reference=fp32_outputs, candidate=int8_outputs)
    print(result.value, result.loss, result.detail["min"])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from servinglib.optimize.errors import OptimizeError

__all__ = ["METRICS", "MetricResult", "baseline", "evaluate"]

METRICS = ("accuracy", "top1", "cosine", "max-abs-error")


@dataclass(frozen=True)
class MetricResult:
    """A metric's value for one model, its loss against FP32, and extra detail (min, ...)."""

    metric: str
    value: float
    loss: float
    samples: int
    detail: dict[str, float] = field(default_factory=dict)


def _check(metric: str, labels: np.ndarray | None) -> None:
    if metric not in METRICS:
        raise OptimizeError(f"metric {metric!r} is not one of {METRICS}")
    if metric == "accuracy" and labels is None:
        raise OptimizeError(
            "metric 'accuracy' needs labels: add a `labels` array to the .npz or a `label` "
            "field to each .jsonl line, or use --metric top1 (agreement with FP32)"
        )


def _argmax(outputs: Sequence[np.ndarray]) -> np.ndarray:
    return np.array([int(np.argmax(o.reshape(-1, o.shape[-1])[0])) for o in outputs])


def _accuracy(outputs: Sequence[np.ndarray], labels: np.ndarray) -> float:
    if len(labels) != len(outputs):
        raise OptimizeError(f"{len(labels)} labels for {len(outputs)} outputs; give one each")
    return float(np.mean(_argmax(outputs) == labels.reshape(-1)))


def baseline(metric: str, reference: Sequence[np.ndarray], labels: np.ndarray | None) -> float:
    """The metric's value for the FP32 model itself."""
    _check(metric, labels)
    if metric == "accuracy":
        assert labels is not None
        return _accuracy(reference, labels)
    return 0.0 if metric == "max-abs-error" else 1.0


def evaluate(
    metric: str,
    *,
    reference: Sequence[np.ndarray],
    candidate: Sequence[np.ndarray],
    labels: np.ndarray | None = None,
) -> MetricResult:
    """Score ``candidate`` outputs against FP32 ``reference`` outputs (and labels).

    Raises:
        OptimizeError: unknown metric, missing labels, or outputs that do not line up.
    """
    _check(metric, labels)
    if len(reference) != len(candidate) or not reference:
        raise OptimizeError(
            f"{len(candidate)} candidate outputs for {len(reference)} reference outputs"
        )
    n = len(reference)
    if metric == "accuracy":
        assert labels is not None
        value = _accuracy(candidate, labels)
        base = _accuracy(reference, labels)
        return MetricResult(metric, value, base - value, n, {"fp32": base})
    if metric == "top1":
        agree = _argmax(candidate) == _argmax(reference)
        value = float(np.mean(agree))
        return MetricResult(
            metric, value, 1.0 - value, n, {"disagreements": float(n - agree.sum())}
        )
    if metric == "cosine":
        cosines = np.array([_cosine(r, c) for r, c in zip(reference, candidate, strict=True)])
        value = float(cosines.mean())
        return MetricResult(
            metric, value, 1.0 - value, n, {"min": float(cosines.min()), "p5": _p5(cosines)}
        )
    errors = np.array(
        [
            float(np.max(np.abs(c.astype(np.float64) - r.astype(np.float64))))
            for r, c in zip(reference, candidate, strict=True)
        ]
    )
    value = float(errors.max())
    return MetricResult(metric, value, value, n, {"mean": float(errors.mean())})


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    norms = float(np.linalg.norm(x) * np.linalg.norm(y))
    if norms == 0.0:
        return 1.0 if not x.any() and not y.any() else 0.0
    return float(x @ y / norms)


def _p5(values: np.ndarray) -> float:
    return float(np.percentile(values, 5))
