"""gthread's admission control: a request that would wait too long for a thread is shed.

Under gthread each request holds a thread until it is answered, so when the model is the
bottleneck the threads all wait on it and further requests queue for a thread, out of
sight of the model's own queue and its shedding. Two rules close that gap:

* the time a request waits for a thread counts against its deadline (the worker passes it
  to the application, which takes it off the request's budget);
* before the main thread queues a complete inference request for a thread, it estimates
  that wait, ``(requests waiting + 1) x the mean time a thread holds a request / threads``,
  and answers 503 with ``Retry-After: 1`` at once when the estimate passes
  ``max_wait_s`` (half the longest model deadline): the request is refused in a
  microsecond instead of waiting its whole deadline for a 503 or a 504.

Example::

    admission = ThreadAdmission(threads=8, max_wait_s=0.5)
    if admission.admit():
        pool.submit(serve)      # serve() calls started() first and finished() last
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["ThreadAdmission"]

_SMOOTHING = 0.2  # weight of the newest request in the moving-average hold time


class ThreadAdmission:
    """Counts the requests waiting for a thread and decides whether one more may wait."""

    def __init__(
        self,
        threads: int,
        max_wait_s: float = float("inf"),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threads = max(1, threads)
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._lock = threading.Lock()
        self.waiting = 0  # queued for a thread, not started yet
        self.hold_s = 0.0  # moving average of how long a thread holds one request

    def expected_wait_s(self) -> float:
        """How long a request queued now would wait for a thread."""
        return (self.waiting + 1) * self.hold_s / self.threads

    def admit(self) -> bool:
        """Queue one request for a thread (True), or refuse it: it would wait too long."""
        with self._lock:
            if self.expected_wait_s() > self.max_wait_s:
                return False
            self.waiting += 1
            return True

    def queued(self) -> None:
        """A request was queued without asking (a kept-alive or TLS connection)."""
        with self._lock:
            self.waiting += 1

    def started(self) -> float:
        """A thread took a queued request; returns the time it started (for finished)."""
        with self._lock:
            self.waiting = max(0, self.waiting - 1)
        return self._clock()

    def finished(self, started: float) -> None:
        """The thread is done with the request it started at ``started``."""
        held = self._clock() - started
        with self._lock:
            self.hold_s += _SMOOTHING * (held - self.hold_s)
