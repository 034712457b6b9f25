"""Binning a batch of one field: the numpy paths agree with the value-by-value path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from servinglib.monitoring.drift import QUALITY_ISSUES, build_profile
from servinglib.monitoring.drift.binning import FieldBinner


def binner(values: list[Any]) -> FieldBinner:
    (field,) = build_profile([({"f": v}, None) for v in values]).fields
    return FieldBinner(field, 0)


def counted(field: FieldBinner, values: list[Any]) -> tuple[list[int], dict[str, int]]:
    counts = np.zeros(field.width, dtype=np.int64)
    field.count(values, counts)
    bins = [int(c) for c in counts[: field.quality]]
    quality = dict(zip(QUALITY_ISSUES, (int(c) for c in counts[field.quality :]), strict=True))
    return bins, quality


rng = np.random.default_rng(0)
WORDS = ["alpha", "beta", "gamma", "delta"]
NUMBERS = [float(x) for x in rng.normal(size=500)]
CASES = {
    "numbers": ("numeric", NUMBERS, [0.3, -7.0, 9.5, 2, float("nan"), float("inf")]),
    "tensors": (  # Open Inference answers: one-element arrays of any numeric dtype
        "numeric",
        NUMBERS,
        [np.array([0.3]), np.array([-7], dtype=np.int32), np.array([[9.5]], dtype=np.float32)],
    ),
    "categories": ("categorical", ["paris", "lyon", "nice"] * 100, ["paris", "tokyo", "lyon"]),
    "texts": (
        "text",
        [" ".join(WORDS[: i % 4 + 1]) * (i % 13 + 1) for i in range(400)],
        ["a", "alpha beta" * 40, "gamma"],
    ),
    "vectors": (
        "norm",
        [[float(x) for x in row] for row in rng.normal(size=(300, 8))],
        [[0.1] * 8, [3.0] * 8, [0.0] * 8],
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_the_batch_path_counts_as_value_by_value(case: str) -> None:
    kind, reference, live = CASES[case]
    field = binner(reference)
    assert field.profile.kind == kind
    fast_bins, fast_quality = counted(field, live)  # one type: the numpy path
    slow_bins, slow_quality = counted(field, [*live, None])  # a null: value by value
    assert fast_bins == slow_bins
    assert {**fast_quality, "missing": fast_quality["missing"] + 1} == slow_quality
    assert sum(fast_bins) + fast_quality["missing"] == len(live)


def test_numbers_out_of_range_and_not_finite() -> None:
    field = binner([float(x) for x in range(100)])
    bins, quality = counted(field, [-5.0, 50.0, 500.0, float("nan"), float("-inf")])
    assert sum(bins) == 3
    assert (bins[0], bins[-1]) == (1, 1)
    assert quality == {"missing": 2, "out_of_range": 2, "unseen_category": 0, "wrong_type": 0}


def test_embedding_arrays_are_stacked_and_binned_by_norm() -> None:
    vectors = rng.normal(size=(300, 16)).astype(np.float32)
    field = binner(list(vectors))
    assert field.profile.kind == "norm"
    live = list(vectors[:50])
    bins, quality = counted(field, live)
    assert quality["wrong_type"] == 0
    one_by_one = [counted(field, [v, None])[0] for v in live]  # value by value
    assert bins == [sum(column) for column in zip(*one_by_one, strict=True)]
    assert sum(bins) == 50
    _, odd = counted(field, [vectors[0], np.array([1.0]), np.array(["a", "b"])])
    assert odd["wrong_type"] == 2


def test_a_batch_with_a_bad_vector_counts_the_others() -> None:
    field = binner([[float(i), 1.0] for i in range(200)])
    bins, quality = counted(field, [[3.0, 1.0], [1.0, "x"], [4.0, 1.0]])
    assert sum(bins) == 2
    assert quality["wrong_type"] == 1
