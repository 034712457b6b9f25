"""Drift statistics between a reference distribution and live counts on the same bins.

Both take the reference as shares (summing to 1) and the live window as raw counts.
Live counts get half a pseudo-count per bin and reference shares a floor of 1e-4, so an
empty bin gives a large but finite score instead of infinity.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["js_distance", "psi"]

_REFERENCE_FLOOR = 1e-4
_PSEUDO_COUNT = 0.5


def _shares(reference: Sequence[float], counts: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    expected = np.maximum(np.asarray(reference, dtype=np.float64), _REFERENCE_FLOOR)
    expected /= expected.sum()
    observed = np.asarray(counts, dtype=np.float64) + _PSEUDO_COUNT
    observed /= observed.sum()
    return expected, observed


def psi(reference: Sequence[float], counts: Sequence[int]) -> float | None:
    """Population stability index: ``sum((live - ref) * ln(live / ref))``; None without data.

    Rule of thumb: < 0.1 stable, 0.1-0.25 moderate shift, > 0.25 significant shift.

    Example::

        psi([0.5, 0.5], [500, 500])  # about 0
    """
    if sum(counts) == 0:
        return None
    expected, observed = _shares(reference, counts)
    return float(np.sum((observed - expected) * np.log(observed / expected)))


def js_distance(reference: Sequence[float], counts: Sequence[int]) -> float | None:
    """Jensen-Shannon distance (base 2, between 0 and 1); None without data."""
    if sum(counts) == 0:
        return None
    expected, observed = _shares(reference, counts)
    middle = (expected + observed) / 2
    divergence = 0.5 * np.sum(expected * np.log2(expected / middle)) + 0.5 * np.sum(
        observed * np.log2(observed / middle)
    )
    return float(np.sqrt(max(divergence, 0.0)))
