"""The gates' tests against SciPy's, and the quantile read from buckets."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats

from servinglib.delivery.statistics import (
    binomial_lower_p,
    binomial_upper_p,
    fisher_p,
    histogram_quantile,
    mann_whitney_p,
    rescale,
    two_proportion_p,
)


@pytest.mark.parametrize(
    ("fc", "nc", "fb", "nb"), [(5, 100, 0, 300), (1, 1, 0, 10), (3, 50, 2, 60), (0, 40, 4, 40)]
)
def test_fisher_is_scipys_one_sided_exact_test(fc: int, nc: int, fb: int, nb: int) -> None:
    expected = stats.fisher_exact([[fc, nc - fc], [fb, nb - fb]], alternative="greater").pvalue
    assert fisher_p(fc, nc, fb, nb) == pytest.approx(expected, rel=1e-9)


def test_one_unlucky_request_proves_nothing() -> None:
    assert fisher_p(1, 1, 0, 10) > 0.05
    assert fisher_p(0, 0, 0, 0) == 1.0


@pytest.mark.parametrize(("k", "n", "rate"), [(5, 100, 0.02), (0, 10, 0.1), (30, 40, 0.9)])
def test_binomial_tails_are_scipys(k: int, n: int, rate: float) -> None:
    assert binomial_upper_p(k, n, rate) == pytest.approx(
        stats.binomtest(k, n, rate, alternative="greater").pvalue if k else 1.0, rel=1e-9
    )
    assert binomial_lower_p(k, n, rate) == pytest.approx(
        stats.binomtest(k, n, rate, alternative="less").pvalue, rel=1e-9
    )


def test_two_proportion_with_a_margin() -> None:
    assert two_proportion_p(10, 200, 2, 200, margin=0.0) < 0.01
    assert two_proportion_p(10, 200, 2, 200, margin=0.05) > 0.5  # 4 % more is within 5 %


def test_mann_whitney_on_buckets_matches_scipy_on_the_tied_values() -> None:
    rng = random.Random(7)
    bounds = [0.01, 0.02, 0.035, 0.05, 0.07, 0.1, math.inf]
    base = [min(b for b in bounds if b >= rng.lognormvariate(-3.9, 0.3)) for _ in range(300)]
    cand = [min(b for b in bounds if b >= rng.lognormvariate(-3.7, 0.3)) for _ in range(120)]
    per_b = [base.count(b) for b in bounds]
    per_c = [cand.count(b) for b in bounds]
    finite_b = [b if math.isfinite(b) else 1.0 for b in base]
    finite_c = [c if math.isfinite(c) else 1.0 for c in cand]
    expected = stats.mannwhitneyu(finite_c, finite_b, alternative="greater", method="asymptotic")
    assert mann_whitney_p(per_b, per_c) == pytest.approx(expected.pvalue, rel=1e-6)
    assert mann_whitney_p(per_b, per_b) > 0.4


def test_histogram_quantile_interpolates_on_a_log_scale() -> None:
    bounds = [0.01, 0.1, math.inf]
    assert histogram_quantile(0.5, bounds, [0, 10, 0]) == pytest.approx(math.sqrt(0.01 * 0.1))
    assert histogram_quantile(0.5, bounds, [10, 0, 0]) == pytest.approx(0.005)
    assert histogram_quantile(0.99, bounds, [1, 1, 8]) == 0.1  # in +Inf: the last bound
    assert math.isnan(histogram_quantile(0.5, bounds, [0, 0, 0]))


def test_rescaling_moves_the_counts_up_and_keeps_them() -> None:
    bounds = [0.01, 0.02, 0.05, math.inf]
    assert rescale(bounds, [10, 10, 10, 1], 1.0) == pytest.approx([10, 10, 10, 1])
    scaled = rescale(bounds, [10, 10, 10, 1], 1.2)
    assert sum(scaled) == pytest.approx(31)
    assert scaled[0] < 10 < scaled[2]  # mass moved to slower buckets
    # 1.1x slower than the baseline is not significantly slower than 1.2x the baseline
    base, cand = [0, 40, 400, 60, 0], [0, 20, 380, 100, 0]
    five = [0.01, 0.02, 0.05, 0.1, math.inf]
    assert mann_whitney_p(base, cand) < 0.01
    assert mann_whitney_p(rescale(five, base, 1.2), cand) > 0.05
