"""gthread's admission control: a request that would wait too long for a thread is shed.

Under gthread each request holds a thread until it is answered, so when the model is the
bottleneck the threads all wait on it and further requests queue for a thread, out of
sight of the model's own queue and its shedding. Two rules close that gap:

* the time a request waits for a thread counts against its deadline (the worker passes it
  to the application, which takes it off the request's budget);
* before the main thread queues a complete inference request for a thread, it estimates
  when the request would be answered: the wait for a thread, ``(requests waiting + 1) x
  the mean time a thread holds a request / threads`` (with a margin), plus the mean time a
  thread holds a request of its model that is served (not shed). When requests are
  already waiting and that passes the model's deadline, it answers
  503 with ``Retry-After: 1`` at once: the request is refused in a microsecond instead of
  waiting for a thread only to be refused by its model's queue, or to time out.

Example::

    admission = ThreadAdmission(threads=8, deadlines_s={"scorer": 1.0})
    model = inference_model(b"/infer", body)     # None: not an inference request
    if model is None or admission.admit(model):
        pool.submit(serve)      # serve() calls started() first and finished(...) last
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

import orjson

__all__ = ["ThreadAdmission", "inference_model"]

_SMOOTHING = 0.2  # weight of the newest request in the moving-average hold time
# The wait estimate counts on this much more than the averages, as the model queue's admission
# does (servinglib.serving.batching): a request let in too optimistically waits for a thread, only
# to be refused by that queue (measured: 56 % of 503s came after such a wait without it).
_ESTIMATE_MARGIN = 1.5
_PEEK_BODY_BYTES = 16384  # a larger /infer body is not parsed on the main thread


def inference_model(path: bytes, body: bytes | bytearray) -> str | None:
    """The model an inference request names ("" when it cannot tell cheaply); None for a
    path that is not an inference route (probes and metrics are never shed).

    Open Inference names it in the path; ``/infer`` in its JSON body's ``model_id``, read
    here only from a small uncompressed body.
    """
    if path == b"/infer":
        if len(body) <= _PEEK_BODY_BYTES and body[:1] == b"{":
            try:
                model = orjson.loads(body).get("model_id")
            except (orjson.JSONDecodeError, AttributeError):
                return ""
            return model if isinstance(model, str) else ""
        return ""
    if path.startswith(b"/v2/models/") and path.endswith(b"/infer"):
        return path[11:-6].split(b"/", 1)[0].decode("latin-1")
    return None


class ThreadAdmission:
    """Counts the requests waiting for a thread and decides whether one more may wait."""

    def __init__(
        self,
        threads: int,
        deadlines_s: Mapping[str, float] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threads = max(1, threads)
        self.deadlines_s = dict(deadlines_s or {})  # by model; unknown: the longest
        self._clock = clock
        self._lock = threading.Lock()
        self.waiting = 0  # queued for a thread, not started yet
        self.hold_s = 0.0  # moving average of how long a thread holds one request
        self.served_s: dict[str, float] = {}  # the same per model, of requests not shed

    def expected_wait_s(self) -> float:
        """How long a request queued now would wait for a thread."""
        return (self.waiting + 1) * self.hold_s / self.threads

    def admit(self, model: str) -> bool:
        """Queue one request for ``model`` (True), or refuse it: it would be answered after
        its deadline."""
        budget_s = self.deadlines_s.get(model)
        if budget_s is None:
            budget_s = max(self.deadlines_s.values(), default=float("inf"))
        with self._lock:
            # Nobody waiting: a thread is free or about to be, whatever the model's pace.
            expected = self.expected_wait_s() * _ESTIMATE_MARGIN + self.served_s.get(model, 0.0)
            if self.waiting and expected > budget_s:
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

    def finished(self, started: float, model: str = "", shed: bool = False) -> None:
        """The thread is done with the request for ``model`` it started at ``started``
        (``shed``: it was refused)."""
        held = self._clock() - started
        with self._lock:
            self.hold_s += _SMOOTHING * (held - self.hold_s)
            if not shed:
                served = self.served_s.get(model, held)
                self.served_s[model] = served + _SMOOTHING * (held - served)
