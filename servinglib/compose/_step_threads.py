"""The threads that run a composed model's parallel steps: daemon threads, never waited for.

A step stuck in a member's ``predict()`` keeps its thread after the request it served was
answered 504 at its deadline. Like the batchers' runners, these threads are daemon threads
and :meth:`StepThreads.close` does not join them, so a worker's graceful shutdown and its
interpreter's exit never wait for such a call (a ``ThreadPoolExecutor``'s threads are
joined at exit, for as long as the call hangs, until the master kills the worker).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

__all__ = ["StepThreads"]

_Work = tuple[Future[Any], Callable[[], Any]]


class StepThreads:
    """Up to ``threads`` daemon threads running submitted callables, started on demand.

    Example::

        steps = StepThreads(8, "servinglib-step")
        future = steps.submit(lambda: 42)
        steps.close()
    """

    def __init__(self, threads: int, name: str) -> None:
        self._max = max(1, threads)
        self._name = name
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, work: Callable[[], Any]) -> Future[Any]:
        """Run ``work`` on one of the threads; its future gets the result or the exception.

        Raises:
            RuntimeError: after :meth:`close`.
        """
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the step threads are closed (the worker is stopping)")
            self._work.put((future, work))
            if len(self._threads) < self._max:
                thread = threading.Thread(
                    target=self._loop, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        return future

    def close(self) -> None:
        """Cancel what has not started and let idle threads end; running steps are not
        waited for (whoever needed their answer waited until its own deadline)."""
        with self._lock:
            self._closed = True
            while True:
                try:
                    item = self._work.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
            for _ in self._threads:
                self._work.put(None)

    def _loop(self) -> None:
        while (item := self._work.get()) is not None:
            future, work = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = work()
            except BaseException as e:  # handed to the waiting step, as an executor does
                future.set_exception(e)
            else:
                future.set_result(result)
