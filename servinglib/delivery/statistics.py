"""The tests behind the gates: one-sided, so a gate fails only on evidence of harm.

* :func:`fisher_p` -- is the candidate's failure rate above the baseline's? (Fisher's
  exact test: valid at any sample size, so a first unlucky request decides nothing.)
* :func:`two_proportion_p` -- is it above the baseline's plus a tolerance? (z-test.)
* :func:`binomial_upper_p` / :func:`binomial_lower_p` -- is a rate above (below) a fixed
  threshold? (exact binomial tails.)
* :func:`proportion_p` -- one of the three above, as a threshold asks.
* :func:`mann_whitney_p` -- do the candidate's latencies sit above the baseline's? (rank
  test on histogram buckets, with the tie correction: every request in one bucket ties.)
  With the baseline's latencies first multiplied by the tolerated ratio
  (:func:`rescale`), it tests "slower than the tolerance", not "slower at all".
* :func:`chi_square_gof_p` -- do live bin counts differ from a reference distribution?
  (Pearson's goodness-of-fit test: the drift gate's evidence that a PSI is not noise.)
* :func:`histogram_quantile` -- a quantile read from cumulative buckets, as PromQL's
  ``histogram_quantile`` reads it.

Pure Python: no SciPy needed at serving time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "binomial_lower_p",
    "binomial_upper_p",
    "chi_square_gof_p",
    "chi_square_sf",
    "fisher_p",
    "histogram_quantile",
    "mann_whitney_p",
    "normal_sf",
    "proportion_p",
    "rescale",
    "two_proportion_p",
]


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def two_proportion_p(
    failed_c: int, total_c: int, failed_b: int, total_b: int, margin: float = 0.0
) -> float:
    """p-value of H0: rate_c <= rate_b + margin against rate_c > rate_b + margin.

    1.0 when either side has no requests or neither side failed (no evidence at all).
    """
    if total_c == 0 or total_b == 0:
        return 1.0
    rate_c, rate_b = failed_c / total_c, failed_b / total_b
    if margin == 0.0:
        pooled = (failed_c + failed_b) / (total_c + total_b)
        variance = pooled * (1 - pooled) * (1 / total_c + 1 / total_b)
    else:  # unpooled: the rates differ by ``margin`` under the null
        variance = (
            rate_c * (1 - rate_c) / total_c + rate_b * (1 - rate_b) / total_b
            or margin * (1 - margin) / total_c  # both 0 or 1: the null's own variance
        )
    if variance <= 0.0:
        return 1.0
    return normal_sf((rate_c - rate_b - margin) / math.sqrt(variance))


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_p(failed_c: int, total_c: int, failed_b: int, total_b: int) -> float:
    """One-sided Fisher exact p-value of H0: rate_c <= rate_b: the chance that, with the
    failures spread at random over all requests, the candidate got ``failed_c`` or more."""
    failed = failed_c + failed_b
    total = total_c + total_b
    if total_c == 0 or total_b == 0 or failed == 0:
        return 1.0
    denominator = _log_choose(total, total_c)
    top = min(failed, total_c)
    return min(
        1.0,
        sum(
            math.exp(
                _log_choose(failed, k) + _log_choose(total - failed, total_c - k) - denominator
            )
            for k in range(failed_c, top + 1)
            if total_c - k <= total - failed
        ),
    )


_MIN_FOR_Z = 30  # the z-test's normal approximation needs this many requests per side


def proportion_p(
    bad_c: int, total_c: int, bad_b: int, total_b: int, cap: float | None, margin: float
) -> tuple[float, str]:
    """p-value and name of the test of "the candidate's bad share is no worse": against an
    absolute ``cap`` (exact binomial), the baseline's plus ``margin`` (z-test, once each side
    has 30 requests), or the baseline's (Fisher exact)."""
    if cap is not None:
        return binomial_upper_p(bad_c, total_c, cap), f"exact binomial test against {cap:.4g}"
    if margin:
        small = min(total_c, total_b) < _MIN_FOR_Z
        p = 1.0 if small else two_proportion_p(bad_c, total_c, bad_b, total_b, margin)
        return p, f"two-proportion z-test, margin {margin:.4g}"
    return fisher_p(bad_c, total_c, bad_b, total_b), "Fisher exact test"


def _log_pmf(k: int, n: int, p: float) -> float:
    return (
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
    )


def binomial_upper_p(successes: int, total: int, rate: float) -> float:
    """P(X >= successes) for X ~ Binomial(total, rate): small when the rate is above ``rate``."""
    if successes <= 0 or total == 0:
        return 1.0
    if rate <= 0.0:
        return 0.0
    if rate >= 1.0:
        return 1.0
    return min(1.0, sum(math.exp(_log_pmf(k, total, rate)) for k in range(successes, total + 1)))


def binomial_lower_p(successes: int, total: int, rate: float) -> float:
    """P(X <= successes) for X ~ Binomial(total, rate): small when the rate is below ``rate``."""
    if total == 0 or successes >= total:
        return 1.0
    if rate >= 1.0:
        return 0.0
    if rate <= 0.0:
        return 1.0
    return min(1.0, sum(math.exp(_log_pmf(k, total, rate)) for k in range(0, successes + 1)))


def mann_whitney_p(baseline: Sequence[float], candidate: Sequence[float]) -> float:
    """One-sided rank test on per-bucket counts (same bucket order for both): p-value of
    H0 "the candidate is not slower", by the normal approximation with tie correction."""
    n_b, n_c = sum(baseline), sum(candidate)
    if n_b == 0 or n_c == 0:
        return 1.0
    u, below, ties = 0.0, 0.0, 0.0
    for count_b, count_c in zip(baseline, candidate, strict=True):
        u += count_c * (below + 0.5 * count_b)  # candidate requests above baseline ones
        below += count_b
        tied = count_b + count_c
        ties += tied**3 - tied
    total = n_b + n_c
    variance = n_b * n_c / 12.0 * ((total + 1) - ties / (total * (total - 1)))
    if variance <= 0.0:
        return 1.0
    return normal_sf((u - n_b * n_c / 2.0 - 0.5) / math.sqrt(variance))


def rescale(bounds: Sequence[float], counts: Sequence[float], factor: float) -> list[float]:
    """Bucket counts of the observations multiplied by ``factor``, in the same buckets: each
    bucket's count spreads over the buckets its scaled range covers (log scale, as the
    bounds grow geometrically; linear in the first bucket, from 0)."""
    out = [0.0] * len(counts)
    lower = 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count:
            low, high = lower * factor, bound * factor
            for j, (target_low, target_high) in enumerate(_ranges(bounds)):
                out[j] += count * _overlap(low, high, target_low, target_high)
        lower = bound
    return out


def _ranges(bounds: Sequence[float]) -> list[tuple[float, float]]:
    return [(bounds[i - 1] if i else 0.0, bound) for i, bound in enumerate(bounds)]


def _overlap(low: float, high: float, target_low: float, target_high: float) -> float:
    """The share of (low, high] inside (target_low, target_high], measured on a log scale."""
    if math.isinf(high):
        return 1.0 if math.isinf(target_high) else 0.0
    start, end = max(low, target_low), min(high, target_high)
    if end <= start:
        return 0.0
    if low <= 0.0:  # the first bucket: linear from 0
        return (end - start) / high
    return math.log(end / start) / math.log(high / low)


def histogram_quantile(quantile: float, bounds: Sequence[float], counts: Sequence[float]) -> float:
    """The ``quantile`` of bucketed observations (``counts[i]`` in ``(bounds[i-1],
    bounds[i]]``; the last bound may be +Inf), interpolated inside its bucket on a log
    scale (latency buckets grow geometrically; linear in the first one, from 0).

    NaN without observations; the highest finite bound when it falls in the +Inf bucket.
    """
    total = sum(counts)
    if total == 0:
        return math.nan
    rank = quantile * total
    cumulative, lower = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count and cumulative + count >= rank:
            if math.isinf(bound):
                return lower
            share = (rank - cumulative) / count
            if lower <= 0.0:
                return bound * share
            return float(lower * (bound / lower) ** share)
        cumulative += count
        if not math.isinf(bound):
            lower = bound
    return lower


def chi_square_sf(x: float, df: int) -> float:
    """P(X > x) for X ~ chi-square with ``df`` degrees of freedom (the regularized upper
    incomplete gamma function Q(df/2, x/2): its series below a + 1, a continued fraction
    above)."""
    if df <= 0 or x <= 0.0:
        return 1.0
    a, y = df / 2.0, x / 2.0
    log_front = a * math.log(y) - y - math.lgamma(a)
    if y < a + 1.0:
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-15:
            n += 1.0
            term *= y / n
            total += term
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = y + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return min(1.0, math.exp(log_front) * h)


def chi_square_gof_p(reference: Sequence[float], counts: Sequence[float]) -> float:
    """p-value of H0 "the counts are drawn from ``reference``" (shares, summing to 1), by
    Pearson's statistic over the bins the reference gives a share; 1.0 without counts."""
    total = sum(counts)
    bins = [(r, c) for r, c in zip(reference, counts, strict=True) if r > 0]
    if total <= 0 or len(bins) < 2:
        return 1.0
    outside = total - sum(c for _, c in bins)  # answers in bins the reference never saw
    if outside > 0:
        return 0.0
    statistic = sum((c - total * r) ** 2 / (total * r) for r, c in bins)
    return chi_square_sf(statistic, len(bins) - 1)
