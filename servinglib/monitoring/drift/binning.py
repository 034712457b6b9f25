"""Bin a batch of one field's values on its profile's bins.

The common shapes take one numpy pass per batch: numbers for a numeric field, strings for a
categorical or text field, equal-length number lists or arrays for an embedding (``norm``).
Anything else (mixed types, nulls among strings, nested objects) goes value by value through
:func:`~servinglib.monitoring.drift.profile.reduce_value`, with the same result.

Counts go into a flat int64 vector: the field's bins from ``offset``, then one counter per
entry of :data:`QUALITY_ISSUES`.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Sequence
from itertools import starmap
from typing import Any

import numpy as np

from servinglib.monitoring.drift.profile import (
    FieldProfile,
    array_scalar,
    reduce_value,
    value_margin,
)

__all__ = ["QUALITY_ISSUES", "FieldBinner"]

QUALITY_ISSUES = ("missing", "out_of_range", "unseen_category", "wrong_type")
_MISSING, _OUT_OF_RANGE, _UNSEEN, _WRONG_TYPE = range(len(QUALITY_ISSUES))
_NUMBERS = frozenset({float, int})
_EXPECTED = {
    "numeric": "numeric",
    "text": "string",
    "categorical": "categorical",
    "length": "array",
    "norm": "array",
    "top_class": "array",
}


class FieldBinner:
    """One field's bins and quality counters, at ``offset`` in a counts vector."""

    def __init__(self, profile: FieldProfile, offset: int) -> None:
        self.profile = profile
        self.offset = offset
        self.quality = offset + profile.bins  # first quality counter
        self.width = profile.bins + len(QUALITY_ISSUES)
        self._edges = np.asarray(profile.edges, dtype=np.float64)
        self._edge_list = list(profile.edges)
        self._categories = {c: i for i, c in enumerate(profile.categories)}
        # a reference value computed or sent a little differently is still in range
        low, high = profile.minimum, profile.maximum
        self._low = -math.inf if low is None else low - value_margin(low)
        self._high = math.inf if high is None else high + value_margin(high)

    def count(self, values: Sequence[Any], counts: np.ndarray) -> None:
        """Add the bin and quality issues of each of ``values`` to ``counts``."""
        kind, types = self.profile.kind, set(map(type, values))
        try:
            if kind == "numeric" and types <= _NUMBERS:
                self._numbers(np.array(values, dtype=np.float64), counts)
                return
            if kind == "numeric" and types == {np.ndarray}:  # Open Inference: 1-element tensors
                numbers = _scalars(values)
                if numbers is not None:
                    self._numbers(numbers, counts)
                    return
            if kind == "categorical" and types == {str}:
                self._strings(values, counts)
                return
            if kind == "text" and types == {str}:
                self._numbers(np.fromiter(map(len, values), np.float64, len(values)), counts)
                return
            if kind == "norm" and types == {list}:
                self._numbers(np.fromiter(starmap(math.hypot, values), np.float64), counts)
                return
            if kind == "norm" and types == {np.ndarray}:
                vectors = _stacked(values)
                if vectors is not None:
                    self._numbers(np.sqrt(np.einsum("ij,ij->i", vectors, vectors)), counts)
                    return
        except (TypeError, ValueError, OverflowError):  # not all numbers: value by value
            pass
        for value in values:
            try:
                self._one(value, counts)
            except (TypeError, ValueError, OverflowError):  # a value nothing can reduce
                counts[self.quality + _WRONG_TYPE] += 1

    def _numbers(self, numbers: np.ndarray, counts: np.ndarray) -> None:
        low, high = numbers.min(), numbers.max()  # NaN if any is NaN
        if not (low >= self._low and high <= self._high):  # rare: check value by value
            finite = np.isfinite(numbers)
            if not finite.all():  # NaN and infinities count as missing
                counts[self.quality + _MISSING] += int(numbers.size - finite.sum())
                numbers = numbers[finite]
            outside = (numbers < self._low) | (numbers > self._high)
            counts[self.quality + _OUT_OF_RANGE] += int(outside.sum())
        bins = np.searchsorted(self._edges, numbers, side="right")
        counts[self.offset : self.quality] += np.bincount(bins, minlength=self.profile.bins)

    def _strings(self, values: Sequence[str], counts: np.ndarray) -> None:
        other = len(self._categories)
        for category, n in Counter(values).items():
            index = self._categories.get(category, other)
            counts[self.offset + index] += n
            if index == other:
                counts[self.quality + _UNSEEN] += n

    def _one(self, value: Any, counts: np.ndarray) -> None:
        """The general path: reduce the value the way the profile was built."""
        field = self.profile
        if field.kind == "norm" and type(value) is list:  # as the batch path does
            try:
                self._numbers(np.array([math.hypot(*value)]), counts)
            except TypeError:  # not all numbers
                counts[self.quality + _WRONG_TYPE] += 1
            return
        try:
            kind, reduced = reduce_value(value)
        except (OverflowError, ValueError):  # e.g. an integer too large for a float
            kind, reduced = "other", None
        if kind == "null":
            counts[self.quality + _MISSING] += 1
            return
        if kind != _EXPECTED[field.kind] and not (field.kind == "categorical" and kind == "string"):
            counts[self.quality + _WRONG_TYPE] += 1
            return
        if field.kind in ("length", "norm", "top_class"):
            reduced = array_scalar(field.kind, reduced)
        elif field.kind == "text":
            reduced = float(len(reduced))
        if field.is_categorical:
            index = self._categories.get(reduced)
            if index is None:
                index = len(self._categories)
                counts[self.quality + _UNSEEN] += 1
            counts[self.offset + index] += 1
            return
        if reduced < self._low or reduced > self._high:
            counts[self.quality + _OUT_OF_RANGE] += 1
        counts[self.offset + bisect.bisect_right(self._edge_list, reduced)] += 1


def _stacked(arrays: Sequence[np.ndarray]) -> np.ndarray | None:
    """Equal-shape numeric vectors as one float64 matrix, or None for anything else."""
    first = arrays[0]
    if first.size < 2 or first.dtype.kind not in "iufb":
        return None  # a one-element tensor is a scalar: the general path says wrong_type
    if any(a.shape != first.shape or a.dtype != first.dtype for a in arrays):
        return None
    return np.stack(arrays).reshape(len(arrays), -1).astype(np.float64, copy=False)


def _scalars(arrays: Sequence[np.ndarray]) -> np.ndarray | None:
    """One-element numeric tensors as a float64 vector, or None for anything else."""
    if any(a.size != 1 or a.dtype.kind not in "iuf" for a in arrays):
        return None  # a boolean tensor is a category: the general path says wrong_type
    return np.concatenate([a.reshape(-1) for a in arrays]).astype(np.float64, copy=False)
