"""Accuracy metrics that compare an optimized model with its FP32 original.

Each metric gives a value and a *loss* (how much worse than the original, ≥ 0 is worse):

==================  ===================================================  =====================
metric              value                                                loss
==================  ===================================================  =====================
``accuracy``        share of argmax predictions equal to the labels      FP32 accuracy - value
``top1``            share of argmax predictions equal to FP32's          1 - value
``cosine``          mean cosine similarity of outputs with FP32's        1 - value
``relative-error``  RMSE against FP32, relative to FP32's spread (std)   max(value, 1 - rank
                                                                         correlation)
``max-abs-error``   largest absolute difference from FP32's outputs      value
``exact``           share of samples whose output equals FP32's exactly  1 - value
==================  ===================================================  =====================

``auto`` (the default) picks one from the FP32 outputs, see
:func:`servinglib.optimize.metric_choice.choose_metric`. A user metric is named
``module:function`` or ``path/file.py:function``; the function is called as
``function(reference, candidate, labels)`` and returns the loss, a float where 0 means "as
good as FP32". For a model with one output, ``reference`` and ``candidate`` are lists of
per-sample arrays; with several outputs, dicts ``{output name: list of per-sample arrays}``,
so one function sees every output. ``labels`` is the label array or None.

Losses are fractions: 0.003 is 0.3 percentage points of accuracy. Outputs are compared per
sample (one array of shape ``[1, ...]`` each); argmax is over the last axis.

Example::

    result = evaluate("cosine", reference=fp32_outputs, candidate=int8_outputs)
    print(result.value, result.loss, result.detail["min"])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.errors import ModelLoadError
from servinglib.lifecycle.importing import import_object
from servinglib.optimize.errors import OptimizeError

__all__ = ["METRICS", "MetricResult", "baseline", "evaluate", "evaluate_user", "load_user_metric"]

METRICS = ("auto", "accuracy", "top1", "cosine", "relative-error", "max-abs-error", "exact")

UserMetric = Callable[[Any, Any, "np.ndarray | None"], float]


@dataclass(frozen=True)
class MetricResult:
    """A metric's value for one model, its loss against FP32, and extra detail (min, ...)."""

    metric: str
    value: float
    loss: float
    samples: int
    detail: dict[str, float] = field(default_factory=dict)


def is_user_metric(metric: str) -> bool:
    """True for ``module:function`` (a user metric) rather than a built-in name."""
    return ":" in metric


def load_user_metric(reference: str, root: Path | None = None) -> UserMetric:
    """The function named ``module:function`` or ``path/file.py:function``.

    Raises:
        OptimizeError: it cannot be imported or is not callable.
    """
    try:
        function = import_object(reference, root or Path.cwd())
    except ModelLoadError as e:
        raise OptimizeError(f"--metric {reference!r}: {e}") from e
    if not callable(function):
        raise OptimizeError(f"--metric {reference!r} is not a function; name a callable")
    return function


def _check(metric: str, labels: np.ndarray | None) -> None:
    if is_user_metric(metric):
        return
    if metric not in METRICS or metric == "auto":
        raise OptimizeError(
            f"metric {metric!r} is not one of {METRICS[1:]} or module:function "
            "('auto' is resolved by choose_metric first)"
        )
    if metric == "accuracy" and labels is None:
        raise OptimizeError(
            "metric 'accuracy' needs labels: add a `labels` array to the .npz, a `label` "
            "field to each .jsonl line, or pass --labels FILE; or use --metric top1"
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
    return 0.0 if metric in ("max-abs-error", "relative-error") or is_user_metric(metric) else 1.0


def _exact(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> MetricResult:
    same = np.array(
        [
            r.shape == c.shape and bool(np.array_equal(r, c))
            for r, c in zip(reference, candidate, strict=True)
        ]
    )
    value = float(same.mean())
    detail = {"disagreements": float(len(same) - same.sum())}
    return MetricResult("exact", value, 1.0 - value, len(same), detail)


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
    if is_user_metric(metric):
        return evaluate_user(metric, list(reference), list(candidate), labels)
    if metric == "exact":
        return _exact(reference, candidate)
    if metric == "accuracy":
        assert labels is not None
        value = _accuracy(candidate, labels)
        base = _accuracy(reference, labels)
        return MetricResult(metric, value, base - value, n, {"fp32": base})
    if metric == "top1":
        agree = _argmax(candidate) == _argmax(reference)
        value = float(np.mean(agree))
        detail = {"disagreements": float(n - agree.sum())}
        if labels is not None and len(labels) == n:
            detail["accuracy"] = _accuracy(candidate, labels)
            detail["accuracy_fp32"] = _accuracy(reference, labels)
        return MetricResult(metric, value, 1.0 - value, n, detail)
    if metric == "cosine":
        cosines = np.array([_cosine(r, c) for r, c in zip(reference, candidate, strict=True)])
        value = float(cosines.mean())
        return MetricResult(
            metric, value, 1.0 - value, n, {"min": float(cosines.min()), "p5": _p5(cosines)}
        )
    if metric == "relative-error":
        return _relative_error(reference, candidate)
    errors = np.array(
        [
            float(np.max(np.abs(c.astype(np.float64) - r.astype(np.float64))))
            for r, c in zip(reference, candidate, strict=True)
        ]
    )
    value = float(errors.max())
    return MetricResult(metric, value, value, n, {"mean": float(errors.mean())})


def _rows(outputs: Sequence[np.ndarray]) -> np.ndarray:
    sizes = {o.size for o in outputs}
    if len(sizes) != 1:
        # sequence outputs of different lengths: compare their means per sample
        return np.array([[float(np.mean(o))] for o in outputs])
    return np.stack([o.astype(np.float64).ravel() for o in outputs])


def _relative_error(
    reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]
) -> MetricResult:
    """RMSE and MAE relative to FP32's spread per output element, and Spearman correlation."""
    ref, cand = _rows(reference), _rows(candidate)
    spread = ref.std(axis=0)
    overall = float(ref.std()) or float(np.abs(ref).mean()) or 1.0
    spread = np.where(spread > 0, spread, overall)
    error = (cand - ref) / spread
    rmse = float(np.sqrt(np.mean(error**2)))
    mae = float(np.mean(np.abs(error)))
    rank = _spearman(ref, cand)
    detail = {
        "relative_mae": mae,
        "mae": float(np.mean(np.abs(cand - ref))),
        "rank_correlation": rank,
        "fp32_spread": float(np.mean(spread)),
    }
    return MetricResult("relative-error", rmse, max(rmse, 1.0 - rank), len(ref), detail)


def _spearman(ref: np.ndarray, cand: np.ndarray) -> float:
    """Mean Spearman rank correlation over output elements (1.0 when FP32 is constant)."""
    values = []
    for column in range(ref.shape[1]):
        a, b = _ranks(ref[:, column]), _ranks(cand[:, column])
        if a.std() == 0:
            continue
        if b.std() == 0:
            values.append(0.0)
            continue
        values.append(float(np.corrcoef(a, b)[0, 1]))
    # rounded: identical rankings give exactly 1, not 1 - 1e-16
    return round(float(np.mean(values)), 12) if values else 1.0


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.arange(len(values), dtype=np.float64)
    # ties share their mean rank
    for value in np.unique(values):
        tied = values == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def evaluate_user(
    metric: str, reference: Any, candidate: Any, labels: np.ndarray | None
) -> MetricResult:
    """Call the user metric ``module:function`` (lists, or dicts of lists per output).

    Raises:
        OptimizeError: it cannot be loaded, raises, or returns no finite float.
    """
    function = load_user_metric(metric)
    try:
        loss = function(reference, candidate, labels)
    except Exception as e:
        raise OptimizeError(
            f"user metric {metric!r} raised {type(e).__name__}: {e}; it is called as "
            "function(reference, candidate, labels) with lists of per-sample arrays (one "
            "output) or dicts of such lists by output name (several outputs)"
        ) from e
    try:
        value = float(loss)
    except (TypeError, ValueError) as e:
        raise OptimizeError(
            f"user metric {metric!r} returned {loss!r}; return the loss as a float"
        ) from e
    if math.isnan(value):
        raise OptimizeError(f"user metric {metric!r} returned NaN; return a finite loss")
    samples = len(next(iter(reference.values()))) if isinstance(reference, dict) else len(reference)
    return MetricResult(metric, value, value, samples)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    norms = float(np.linalg.norm(x) * np.linalg.norm(y))
    if norms == 0.0:
        return 1.0 if not x.any() and not y.any() else 0.0
    return float(x @ y / norms)


def _p5(values: np.ndarray) -> float:
    return float(np.percentile(values, 5))
