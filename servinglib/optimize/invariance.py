"""Batch invariance: does a request get the same answer alone as inside a batch?

A served model with dynamic batching answers each request inside whatever batch it landed
in. FP32 models and statically quantized models compute each row on its own, so the answer
does not depend on the neighbours (up to float summation order). Dynamic quantization picks
its activation scale from the whole batch: one outlier row coarsens every other row's
quantization, and a request's answer changes with its company.

The check runs every sample alone, then inside batches of other samples: shuffled batches
(``trials`` times) and batches that each include the most extreme sample (the one with the
largest float input). The deviation of a sample is ``max|y_batch - y_alone| / max|y_alone|``;
the model is invariant when the worst deviation is within ``tolerance``. Batches are
zero-padded to a common shape, as a served batch of sequences is.

Example::

    result = check_batch_invariance(session.run_each, session.run_batch, samples.feeds)
    if not result.invariant:
        print(f"worst deviation {result.worst_relative:.3g}")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servinglib.lifecycle.selftest import to_plain
from servinglib.model import Model

__all__ = [
    "DEFAULT_TOLERANCE",
    "InvarianceResult",
    "check_batch_invariance",
    "check_model_batch_invariance",
]

DEFAULT_TOLERANCE = 1e-3
RunEach = Callable[[Sequence[Any]], Sequence[Any]]  # per sample: an array or a tuple of them


@dataclass(frozen=True)
class InvarianceResult:
    """Worst deviation of any sample between alone and batched, and the verdict."""

    batch_size: int
    batches: int
    tolerance: float
    worst_relative: float
    worst_absolute: float
    samples_over_tolerance: int
    samples: int
    top1_changes: int

    @property
    def invariant(self) -> bool:
        """True when every sample's deviation is within the tolerance."""
        return self.worst_relative <= self.tolerance


def _trim(batched: np.ndarray, alone: np.ndarray) -> np.ndarray:
    """The batched row cut to the alone output's shape (padding may have grown it)."""
    if batched.shape == alone.shape:
        return batched
    return batched[tuple(slice(0, n) for n in alone.shape)]


def _parts(output: Any) -> tuple[np.ndarray, ...]:
    return tuple(output) if isinstance(output, tuple | list) else (output,)


def _largest_float(item: Any) -> float:
    """The largest |value| among the float arrays of a feed-like mapping (-1: none)."""
    if not isinstance(item, Mapping):
        return -1.0
    found = -1.0
    for value in item.values():
        array = value if isinstance(value, np.ndarray) else None
        if array is None and isinstance(value, list | tuple):
            try:
                array = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                continue
        if array is not None and array.dtype.kind == "f" and array.size:
            found = max(found, float(np.abs(array).max()))
    return found


def _extreme(feeds: Sequence[Any]) -> int | None:
    """Index of the sample with the largest float input, None when no input is float."""
    scores = [_largest_float(feed) for feed in feeds]
    best = int(np.argmax(scores))
    return best if scores[best] >= 0 else None


def _batches(count: int, size: int, trials: int, extreme: int | None, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(trials):
        order = [int(i) for i in rng.permutation(count)]
        batches += [order[i : i + size] for i in range(0, count, size)]
    if extreme is not None:
        others = [i for i in range(count) if i != extreme]
        batches += [[*others[i : i + size - 1], extreme] for i in range(0, len(others), size - 1)]
    return [b for b in batches if len(b) > 1]


def check_batch_invariance(
    run_each: RunEach,
    run_batch: RunEach,
    feeds: Sequence[Any],
    *,
    batch_size: int = 8,
    trials: int = 2,
    tolerance: float = DEFAULT_TOLERANCE,
    seed: int = 0,
    alone: Sequence[Any] | None = None,
) -> InvarianceResult:
    """Compare each sample's output alone with its outputs inside mixed batches.

    Args:
        run_each: outputs for feeds run one at a time.
        run_batch: outputs for feeds run as one batch (one row per feed).
        feeds: the samples, one per feed.
        batch_size: size of the mixed batches.
        trials: shuffled passes over the samples.
        tolerance: largest relative deviation still called invariant.
        seed: shuffling seed.
        alone: outputs of ``run_each(feeds)`` when already known.
    """
    alone = list(alone) if alone is not None else run_each(feeds)
    worst_rel = np.zeros(len(feeds))
    worst_abs = np.zeros(len(feeds))
    top1_changed = np.zeros(len(feeds), dtype=bool)
    batches = _batches(len(feeds), max(2, batch_size), trials, _extreme(feeds), seed)
    for indices in batches:
        outputs = run_batch([feeds[i] for i in indices])
        for i, batched in zip(indices, outputs, strict=True):
            # a sample's outputs: one array, or a tuple of them (models with several outputs),
            # each compared on its own scale
            for part_alone, part_batched in zip(_parts(alone[i]), _parts(batched), strict=True):
                reference = part_alone.astype(np.float64)
                row = _trim(part_batched, part_alone).astype(np.float64)
                diff = float(np.max(np.abs(row - reference))) if reference.size else 0.0
                scale = max(float(np.max(np.abs(reference))) if reference.size else 0.0, 1e-12)
                worst_abs[i] = max(worst_abs[i], diff)
                worst_rel[i] = max(worst_rel[i], diff / scale)
                if reference.ndim and reference.shape[-1] > 1:
                    top1_changed[i] |= bool(
                        np.argmax(row.reshape(-1, row.shape[-1])[0])
                        != np.argmax(reference.reshape(-1, reference.shape[-1])[0])
                    )
    return InvarianceResult(
        batch_size=batch_size,
        batches=len(batches),
        tolerance=tolerance,
        worst_relative=float(worst_rel.max(initial=0.0)),
        worst_absolute=float(worst_abs.max(initial=0.0)),
        samples_over_tolerance=int((worst_rel > tolerance).sum()),
        samples=len(feeds),
        top1_changes=int(top1_changed.sum()),
    )


def _numbers(output: Any) -> np.ndarray:
    """Every number of a model's answer (dicts, lists, arrays), in order, as one vector."""
    plain = to_plain(output)
    values: list[float] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key in sorted(value):
                walk(value[key])
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            values.append(float(value))

    walk(plain)
    return np.asarray(values, dtype=np.float64)


def check_model_batch_invariance(
    model: Model,
    inputs: Sequence[Any],
    *,
    batch_size: int = 8,
    trials: int = 2,
    tolerance: float = DEFAULT_TOLERANCE,
) -> InvarianceResult:
    """Batch invariance of a loaded :class:`~servinglib.model.Model` on request ``inputs``.

    Each input goes through ``prepare`` and ``predict`` alone, then through ``predict_batch``
    in mixed batches, as the dynamic batcher would send it; every number of the answers is
    compared. For a model served with ``batching:``, the self-test inputs are a natural set::

        result = check_model_batch_invariance(model, [case.input for case in cases])
    """
    prepared = [model.prepare(item) for item in inputs]

    def run_each(items: Sequence[Any]) -> list[np.ndarray]:
        return [_numbers(model.predict(item)) for item in items]

    def run_batch(items: Sequence[Any]) -> list[np.ndarray]:
        return [_numbers(answer) for answer in model.predict_batch(list(items))]

    return check_batch_invariance(
        run_each,
        run_batch,
        prepared,
        batch_size=min(batch_size, max(2, len(prepared))),
        trials=trials,
        tolerance=tolerance,
    )
