"""The shadows' CPU budget: at most a share of one core per worker, or copies are shed.

A token bucket: it fills at ``share`` seconds of work per second, up to ``share`` x
``window_s``. A copy is admitted while the bucket is not empty, and what it cost is taken
out once it finished, so a long copy can leave the bucket below zero and shed the copies
after it until the time is paid back. Over any stretch longer than the window the shadows
use at most ``share`` of a core on average.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["CpuBudget"]


class CpuBudget:
    """At most ``share`` seconds of shadow work per second.

    Example::

        budget = CpuBudget(0.1)
        if budget.admit():
            ...  # run the copy
            budget.spend(0.05)
    """

    def __init__(
        self, share: float, window_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._share = share
        self._capacity = share * window_s
        self._tokens = self._capacity
        self._clock = clock
        self._at = clock()
        self._lock = threading.Lock()

    def admit(self) -> bool:
        """Whether a copy may run now (the bucket is not empty)."""
        with self._lock:
            self._refill()
            return self._tokens > 0

    def spend(self, seconds: float) -> None:
        """Take ``seconds`` of work (CPU, or interpreter-lock time) out of the bucket."""
        with self._lock:
            self._refill()
            self._tokens -= seconds

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._at) * self._share)
        self._at = now
