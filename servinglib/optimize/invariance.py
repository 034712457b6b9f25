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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from servinglib.optimize.samples import Feed

__all__ = ["DEFAULT_TOLERANCE", "InvarianceResult", "check_batch_invariance"]

DEFAULT_TOLERANCE = 1e-3
RunEach = Callable[[Sequence[Feed]], list[np.ndarray]]


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


def _extreme(feeds: Sequence[Feed]) -> int | None:
    """Index of the sample with the largest float input, None when no input is float."""
    scores = [
        max((float(np.abs(a).max()) for a in feed.values() if a.dtype.kind == "f"), default=-1.0)
        for feed in feeds
    ]
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
    feeds: Sequence[Feed],
    *,
    batch_size: int = 8,
    trials: int = 2,
    tolerance: float = DEFAULT_TOLERANCE,
    seed: int = 0,
    alone: Sequence[np.ndarray] | None = None,
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
            reference = alone[i].astype(np.float64)
            row = _trim(batched, alone[i]).astype(np.float64)
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
