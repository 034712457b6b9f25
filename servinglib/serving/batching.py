"""DynamicBatcher: Triton-style dynamic batching with threads (gunicorn gthread workers).

Requests of one model version queue up; executor threads (one per model instance) take
them in batches and call ``predict_batch`` once per batch, when
:func:`~servinglib.serving.dispatch_rule.dispatch_size` says a batch should go.

Calls always run on the executor threads, never on the caller's, so the caller can answer
504 at the deadline whether or not the call started.

The queue is bounded: a full queue refuses at once (503 + Retry-After upstream), and so
does a request the queue cannot answer before its deadline (the batches ahead at the
moving average batch duration). A request whose deadline passed while it queued is not
run. A watchdog (:mod:`servinglib.serving.watchdog`) asks :meth:`DynamicBatcher.newly_lost` for
runners stuck far past their deadline; once every runner is lost the version refuses.
When a batch raises, it is bisected so that only the poison input fails: Triton, MLServer
and Ray Serve fail the whole batch.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from servinglib.config.spec import BatchPolicy
from servinglib.errors import (
    DeadlineExceededError,
    ModelNotReadyError,
    OverloadedError,
    ServinglibError,
)
from servinglib.serving.dispatch_rule import dispatch_size
from servinglib.serving.isolation import run_isolating
from servinglib.serving.queue_items import (
    Arrival,
    BatchListener,
    QueuedItem,
    ReleaseOrder,
    settle,
)

__all__ = ["Arrival", "BatchFunction", "BatchListener", "DynamicBatcher", "run_isolating"]

log = logging.getLogger("servinglib.serving.batching")

BatchFunction = Callable[[list[Any]], Sequence[Any]]

_SMOOTHING = 0.1  # weight of the newest batch in the moving average of batch durations
# Admission counts on batches taking this much longer than their average (wake-ups, a
# loaded machine): under overload a queue kept a little shorter still keeps every runner
# busy, while a request admitted too optimistically does its work and still answers 504.
_ESTIMATE_MARGIN = 1.5
_CLOSE_POLL_S = 0.05  # how often close() looks again whether a busy runner was abandoned


class DynamicBatcher:
    """Collects single requests into batches for ``run_batch`` (e.g. ``Model.predict_batch``).

    Example::

        batcher = DynamicBatcher(model.predict_batch, BatchPolicy(max_batch_size=16))
        with batcher.incoming():
            future = batcher.submit(features)
        output = future.result()
    """

    def __init__(
        self,
        run_batch: BatchFunction | Sequence[BatchFunction],
        policy: BatchPolicy,
        *,
        name: tuple[str, str] = ("model", "1"),
        listener: BatchListener | None = None,
        clock: Callable[[], float] = time.monotonic,
        start: bool = True,
    ) -> None:
        runners = list(run_batch) if isinstance(run_batch, Sequence) else [run_batch]
        self._runners = runners
        self.policy = policy
        self._name = name
        self._listener = listener
        self._clock = clock
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._queues: list[deque[QueuedItem]] = [
            deque() for _ in range(max(1, policy.priority_levels))
        ]
        self._size = 0
        self._incoming = 0
        self._closed = False
        self._sequence = itertools.count()
        self._ordering = ReleaseOrder()
        self._running = 0  # batches being run by executor threads
        self._last_size = 0  # requests in the previous batch, and when it was dispatched
        self._last_dispatch = float("-inf")
        self._busy: dict[int, tuple[float, float]] = {}  # runner -> (started, latest deadline)
        self._lost: set[int] = set()  # runners stuck in a call far past its deadline
        self._batch_s = 0.0  # moving average of a batch's duration
        self._threads = [
            threading.Thread(
                target=self._loop,
                args=(runner, i),
                name=f"servinglib-batcher-{name[0]}-{i}",
                daemon=True,
            )
            for i, runner in enumerate(runners)
        ]
        if start:
            for thread in self._threads:
                thread.start()

    # --- producer side -------------------------------------------------------------------
    @contextmanager
    def incoming(self) -> Iterator[Arrival]:
        """Announce a request on its way (validating, decoding): the batcher may wait for it.

        Pass the yielded :class:`Arrival` to :meth:`submit`: the request then stops being
        "on its way" in the same step as it joins the queue, so a lone request is dispatched
        at once, with one wake-up of the executor instead of two.
        """
        arrival = Arrival()
        with self._lock:
            self._incoming += 1
        try:
            yield arrival
        finally:
            if arrival.pending:
                with self._lock:
                    if arrival.pending:
                        arrival.pending = False
                        self._incoming -= 1
                        self._ready.notify_all()

    def submit(
        self,
        payload: Any,
        *,
        priority: int | None = None,
        deadline: float | None = None,
        arrival: Arrival | None = None,
    ) -> Future[Any]:
        """Queue one request; its future gets the result or the exception.

        ``arrival``: the announcement of this request by :meth:`incoming`, consumed here.

        Raises:
            OverloadedError: the queue holds ``max_queue_size`` requests (or is closed).
        """
        level = self.policy.default_priority if priority is None else priority
        level = min(max(level, 0), len(self._queues) - 1)
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise OverloadedError(
                    f"model {self._name[0]!r} is shutting down; retry another replica"
                )
            if self._size >= self.policy.max_queue_size:
                raise OverloadedError(
                    f"model {self._name[0]!r} version {self._name[1]!r} has {self._size} requests "
                    f"queued (max_queue_size); retry later"
                )
            if len(self._lost) == len(self._runners):
                raise ModelNotReadyError(
                    self._name[0], self._name[1], "WEDGED", "every thread is stuck in predict()"
                )
            if (
                deadline is not None
                and (self._size or self._busy)
                and self._clock() + self._finish_s() > deadline
            ):
                raise OverloadedError(
                    f"model {self._name[0]!r} version {self._name[1]!r} cannot answer this "
                    f"request within its deadline ({self._size} queued); retry later"
                )
            if arrival is not None and arrival.pending:
                arrival.pending = False
                self._incoming -= 1
            item = QueuedItem(payload, future, self._clock(), deadline, next(self._sequence), level)
            self._queues[level].append(item)
            self._size += 1
            depth = self._size
            self._ready.notify()
        if self._listener:
            self._listener.queue_depth(*self._name, depth)
        return future

    def _finish_s(self) -> float:
        """Expected time until a request joining the queue now is answered (lock held).

        The batches queued ahead, one more while every runner is busy, and its own.
        """
        working = max(1, len(self._runners) - len(self._lost))
        rounds = math.ceil((self._size + 1) / (self.policy.max_batch_size * working))
        busy = len(self._busy) >= working
        return (rounds + busy) * self._batch_s * _ESTIMATE_MARGIN

    # --- watchdog side -------------------------------------------------------------------
    def newly_lost(self, margin_s: float) -> list[int]:
        """Runners whose call outlived its deadline by ``margin_s``: now counted lost.

        A lost runner comes back when its call returns; meanwhile the queue counts on the
        others, and once every runner is lost the version refuses requests.
        """
        now = self._clock()
        with self._lock:
            lost = [
                runner
                for runner, (_, deadline) in self._busy.items()
                if runner not in self._lost and now > deadline + margin_s
            ]
            self._lost.update(lost)
        return lost

    @property
    def wedged(self) -> bool:
        """Every runner is lost."""
        return len(self._lost) == len(self._runners)

    # --- consumer side -------------------------------------------------------------------
    def _take(self, count: int) -> list[QueuedItem]:
        taken: list[QueuedItem] = []
        for queue in self._queues:
            while queue and len(taken) < count:
                taken.append(queue.popleft())
        self._size -= len(taken)
        return taken

    def _oldest(self) -> float:
        return min(queue[0].enqueued for queue in self._queues if queue)

    def _batch_size_now(self) -> int | None:
        """How many to dispatch now, or None to keep waiting (call with the lock held)."""
        if self._size == 0:
            return None
        now = self._clock()
        return dispatch_size(
            self.policy,
            queued=self._size,
            closed=self._closed,
            announced=self._incoming,
            last_size=self._last_size,
            since_last_dispatch_s=now - self._last_dispatch,
            oldest_wait_s=now - self._oldest(),
        )

    def next_batch(self, timeout: float | None = None) -> list[QueuedItem] | None:
        """Block until a batch is due (None when closed and drained, or on ``timeout``)."""
        with self._lock:
            waited_until = None if timeout is None else self._clock() + timeout
            while True:
                count = self._batch_size_now()
                if count is not None:
                    batch = self._take(count)
                    depth = self._size
                    self._running += 1
                    self._last_size, self._last_dispatch = len(batch), self._clock()
                    break
                if self._closed and self._size == 0:
                    return None
                wait = None
                if self._size:
                    wait = max(
                        0.0, self._oldest() + self.policy.max_queue_delay_us / 1e6 - self._clock()
                    )
                if waited_until is not None:
                    remaining = waited_until - self._clock()
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                self._ready.wait(wait)
        if self._listener:
            self._listener.queue_depth(*self._name, depth)
        return batch

    def run(self, batch: list[QueuedItem], run_batch: BatchFunction, runner: int = 0) -> None:
        """Run one batch from :meth:`next_batch` on ``runner``: skip expired requests,
        isolate poison inputs, and time it (the watchdog and admission read the timings)."""
        started = self._clock()
        deadlines = [item.deadline for item in batch if item.deadline is not None]
        with self._lock:
            self._busy[runner] = (started, max(deadlines, default=float("inf")))
        try:
            self._run_batch(batch, run_batch)
        finally:
            with self._lock:
                self._running -= 1
                del self._busy[runner]
                if runner in self._lost:
                    self._lost.discard(runner)
                    log.warning("model %r: a lost call returned", self._name[0])
                took = self._clock() - started
                # the first batch sets the estimate: averaging up from 0 would admit a
                # burst the version cannot answer in time
                self._batch_s += (_SMOOTHING if self._batch_s else 1.0) * (took - self._batch_s)

    def _run_batch(self, batch: list[QueuedItem], run_batch: BatchFunction) -> None:
        now = self._clock()
        live = []
        for item in batch:
            if self._listener:
                self._listener.request_queued(*self._name, now - item.enqueued)
            if item.deadline is not None and now >= item.deadline:
                self._resolve(
                    item,
                    None,
                    DeadlineExceededError(
                        f"model {self._name[0]!r} could not start within the request deadline "
                        f"(queued {1000 * (now - item.enqueued):.0f} ms); the work was not started"
                    ),
                )
            elif item.future.set_running_or_notify_cancel():
                live.append(item)
            else:  # cancelled while queued: nothing to run, but keep the ordering moving
                self._resolve(item, None, None)
        if live:
            self._run_isolating(live, run_batch)

    def _run_isolating(self, items: list[QueuedItem], run_batch: BatchFunction) -> None:
        def executed(size: int) -> None:
            if self._listener:
                self._listener.batch_executed(*self._name, size)

        results = run_isolating(run_batch, [item.payload for item in items], executed)
        for item, (output, error) in zip(items, results, strict=True):
            self._resolve(item, output, error)

    def _resolve(self, item: QueuedItem, output: Any, error: BaseException | None) -> None:
        if not self.policy.preserve_ordering:
            settle(item, output, error)
            return
        with self._lock:
            ordering = self._ordering
            ordering.done[item.sequence] = (item, output, error)
            ready = []
            while ordering.next_sequence in ordering.done:
                ready.append(ordering.done.pop(ordering.next_sequence))
                ordering.next_sequence += 1
        for done_item, done_output, done_error in ready:
            settle(done_item, done_output, done_error)

    def _loop(self, run_batch: BatchFunction, runner: int) -> None:
        while True:
            batch = self.next_batch()
            if batch is None:
                return
            try:
                self.run(batch, run_batch, runner)
            except Exception:  # never let one batch kill the executor thread
                log.exception("batch of model %r failed outside the model", self._name[0])
                for item in batch:
                    if not item.future.done():
                        self._resolve(item, None, ServinglibError("internal batching error"))

    def close(self, timeout_s: float = 30.0) -> None:
        """Refuse new requests, run every queued one that can still be answered, stop the
        threads.

        Not waited for: lost runners, and runners in a call that outlived the deadline of
        every request it serves (each of them was answered 504 at its deadline: nobody is
        left to answer, so shutdown does not wait for the watchdog's margin or the call).
        Requests nobody can run any more fail with 503.
        """
        with self._lock:
            self._closed = True
            self._ready.notify_all()
        give_up = time.monotonic() + timeout_s
        for i, thread in enumerate(self._threads):
            while thread.is_alive() and not self._abandoned(i) and time.monotonic() < give_up:
                thread.join(_CLOSE_POLL_S)
        with self._lock:
            stranded = self._take(self._size)
        for item in stranded:
            settle(item, None, OverloadedError(f"model {self._name[0]!r} is shutting down"))

    def _abandoned(self, runner: int) -> bool:
        """Whether ``runner`` is lost, or in a call past every deadline of its batch."""
        with self._lock:
            busy = self._busy.get(runner)
            return runner in self._lost or (busy is not None and self._clock() >= busy[1])

    @property
    def depth(self) -> int:
        """Requests waiting in the queue."""
        return self._size
