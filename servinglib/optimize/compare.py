"""Which of two latency measurements is faster, or whether the rounds cannot tell.

Models are measured in rounds that take turns run by run (see :mod:`.measure`), so round
*i* of one model and round *i* of another saw the same load. Model A is called *faster*
than B only when all of these hold:

* a one-sided sign test over the paired rounds: A's round p50 is below B's in at least
  ``k`` of ``n`` rounds, ``k`` the smallest count with probability ≤ 5 % under "equally
  fast" (5 of 5, 12 of 15; with fewer than 5 rounds nothing is distinguishable);
* the medians differ by at least :data:`MIN_EFFECT` (3 %), a difference worth choosing on;
* where the rounds of either spread by more than :data:`ROUND_SPREAD_WARNING` (25 %), the
  machine was busy, and the medians must differ by more than that spread. A busy machine can
  favour one model in every round: the digits example's static per-channel won 5 of 5 rounds
  by 5 % while its rounds spread by 52 %, where quiet runs find it 1 to 4 % slower than
  static; a 3x difference still shows through such noise.

Otherwise the two are *indistinguishable*, and the search decides on batch invariance, then
size, then loss, all of which are measured exactly.

The report's speed-ups (:func:`speed_claim`) follow the same rule: p50, p95 and throughput
are each called faster or slower only when their rounds separate that way, and come with
the interval of the per-round ratios (lowest to highest paired round); otherwise "no
measurable difference" is all that is claimed.

Example::

    verdict = compare_rounds(a.rounds_p50_ms, b.rounds_p50_ms)
    print(verdict.faster, verdict.describe("dynamic"))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MIN_EFFECT",
    "NO_DIFFERENCE",
    "ROUND_SPREAD_WARNING",
    "Comparison",
    "SpeedClaim",
    "compare_rounds",
    "round_spread",
    "speed_claim",
]

MIN_EFFECT = 0.03
SIGNIFICANCE = 0.05
ROUND_SPREAD_WARNING = 0.25


@dataclass(frozen=True)
class Comparison:
    """A against B: ``faster`` is True (A faster), False (B faster) or None (cannot tell)."""

    faster: bool | None
    wins: int
    rounds: int
    needed: int
    ratio: float
    spread: float = 0.0  # the larger round spread of the two

    def describe(self, other: str) -> str:
        """E.g. ``faster than dynamic (won 5 of 5 rounds, 0.82x the time)``."""
        detail = f"won {self.wins} of {self.rounds} rounds, {self.ratio:.2f}x the time"
        if self.faster is None:
            if self.needed > self.rounds:
                why = "too few rounds to tell"
            elif self.spread > ROUND_SPREAD_WARNING:
                why = (
                    f"rounds spread by {self.spread:.0%}: a busy machine, only a larger "
                    "difference counts"
                )
            else:
                why = f"{self.needed} wins needed"
            return f"indistinguishable from {other} ({detail}; {why})"
        return f"{'faster' if self.faster else 'slower'} than {other} ({detail})"


def _needed(rounds: int) -> int:
    """Smallest win count whose one-sided sign-test probability is ≤ SIGNIFICANCE."""
    for k in range(rounds + 1):
        tail = sum(math.comb(rounds, j) for j in range(k, rounds + 1)) / 2**rounds
        if tail <= SIGNIFICANCE:
            return k
    return rounds + 1


def compare_rounds(a: Sequence[float], b: Sequence[float]) -> Comparison:
    """Compare paired round medians (ms) of two models measured together."""
    rounds = min(len(a), len(b))
    pairs = list(zip(a[:rounds], b[:rounds], strict=True))
    wins = sum(1 for x, y in pairs if x < y)
    losses = sum(1 for x, y in pairs if x > y)
    median_a, median_b = float(np.median(a)), float(np.median(b))
    ratio = median_a / median_b if median_b > 0 else 1.0
    needed = _needed(rounds)
    spread = max(round_spread(a[:rounds]), round_spread(b[:rounds]))
    # a busy machine's rounds: the difference must exceed their spread, either way round
    busy = spread > ROUND_SPREAD_WARNING and max(ratio, 1 / ratio) - 1 <= spread
    faster: bool | None = None
    if abs(1.0 - ratio) >= MIN_EFFECT and not busy:
        if wins >= needed and ratio < 1.0:
            faster = True
        elif losses >= needed and ratio > 1.0:
            faster = False
    return Comparison(faster, wins, rounds, needed, ratio, spread)


def round_spread(rounds: Sequence[float]) -> float:
    """(slowest - fastest round) / median round: 0.1 means rounds differ by 10 %."""
    if not rounds:
        return 0.0
    median = float(np.median(rounds))
    return (max(rounds) - min(rounds)) / median if median > 0 else 0.0


NO_DIFFERENCE = "no measurable difference"


@dataclass(frozen=True)
class SpeedClaim:
    """FP32 time / INT8 time for one figure, its per-round interval and what may be claimed.

    ``ratio`` above 1 means INT8 is faster; ``verdict`` is ``faster``, ``slower`` or
    :data:`NO_DIFFERENCE`; ``low`` and ``high`` are the lowest and highest paired round ratio.
    """

    figure: str
    ratio: float
    low: float
    high: float
    rounds: int
    verdict: str
    why: str

    @property
    def claimed(self) -> bool:
        """True when the rounds separate: a speed-up (or slow-down) may be stated."""
        return self.verdict != NO_DIFFERENCE

    def describe(self) -> str:
        """E.g. ``p50 2.23x faster (rounds 2.10-2.31x)`` or ``p95: no measurable ...``."""
        interval = f"rounds {self.low:.2f}-{self.high:.2f}x"
        if not self.claimed:
            return f"{self.figure}: {NO_DIFFERENCE} ({self.ratio:.2f}x, {interval}; {self.why})"
        shown = self.ratio if self.ratio >= 1 else 1 / self.ratio
        return f"{self.figure} {shown:.2f}x {self.verdict} ({interval})"


def speed_claim(
    figure: str,
    fp32_times: Sequence[float],
    int8_times: Sequence[float],
    *,
    technique: str = "INT8",
) -> SpeedClaim:
    """What may be said of the optimized model against the original from paired round times.

    ``fp32_times`` are the original's, ``int8_times`` the optimized model's (ms, or s per
    sample); ``technique`` names the optimized model in the reason (``INT8``, ``pruned``).
    """
    verdict = compare_rounds(int8_times, fp32_times)
    rounds = verdict.rounds
    ratios = [f / i for f, i in zip(fp32_times[:rounds], int8_times[:rounds], strict=True) if i > 0]
    median_int8 = float(np.median(int8_times)) if len(int8_times) else 0.0
    ratio = float(np.median(fp32_times)) / median_int8 if median_int8 > 0 else 1.0
    low, high = (min(ratios), max(ratios)) if ratios else (ratio, ratio)
    said = NO_DIFFERENCE
    if verdict.faster is True and low > 1.0:
        said = "faster"
    elif verdict.faster is False and high < 1.0:
        said = "slower"
    if verdict.needed > rounds:
        why = f"{rounds} round(s) are too few to tell; use --repeats 5 or more"
    elif verdict.spread > ROUND_SPREAD_WARNING:
        why = f"rounds spread by {verdict.spread:.0%}: a busy machine"
    elif abs(1.0 - verdict.ratio) < MIN_EFFECT:
        why = f"less than {MIN_EFFECT:.0%} apart"
    else:
        why = (
            f"{technique} faster in {verdict.wins} of {rounds} rounds, "
            f"{verdict.needed} needed either way"
        )
    return SpeedClaim(figure, ratio, low, high, rounds, said, why)
