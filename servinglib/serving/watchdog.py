"""The watchdog: finds model calls stuck far past their deadline and retires a wedged worker.

Python cannot stop a thread stuck in ``predict()``. What it can do is stop counting on it:
a call that outlives its request's deadline by ``server.watchdog_margin_s`` marks its
thread lost (``servinglib_lost_calls_total``). A version whose threads are all lost turns
not ready and refuses requests with 503; the worker then reports itself not live and
exits gracefully, so gunicorn starts a fresh one (which loads the version again).

Each round also samples the worker's resident memory for the
``servinglib_worker_resident_memory_bytes`` gauge, and retires the worker the same way
once it exceeds ``server.max_rss_mb`` (a model that leaks cannot grow without bound).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Protocol

from servinglib.serving.service import InferenceService

__all__ = ["LostCallListener", "Watchdog", "resident_memory_bytes"]

log = logging.getLogger("servinglib.serving.watchdog")


class LostCallListener(Protocol):
    """Told about lost calls and memory; the metrics layer implements it."""

    def call_lost(self, model: str, version: str) -> None:
        """A call of ``model`` ``version`` outlived its deadline by the margin."""

    def resident_memory_bytes(self, rss: int) -> None:
        """The worker's resident memory now."""


class Watchdog:
    """Checks every executor of ``service`` a few times a second on a daemon thread.

    Example::

        watchdog = Watchdog(service, margin_s=5.0, on_wedged=stop_worker)
        watchdog.start()
    """

    def __init__(
        self,
        service: InferenceService,
        margin_s: float,
        listener: LostCallListener | None = None,
        on_wedged: Callable[[], None] | None = None,
        interval_s: float = 0.25,
        max_rss_bytes: int = 0,
    ) -> None:
        self._service = service
        self._margin_s = margin_s
        self._listener = listener
        self._on_wedged = on_wedged
        self._interval_s = interval_s
        self._max_rss_bytes = max_rss_bytes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="servinglib-watchdog", daemon=True)
        self.live = True

    def start(self) -> None:
        """Start watching."""
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (the worker is closing)."""
        self._stop.set()

    def check(self) -> None:
        """One round: count newly lost calls; retire the worker once a version is wedged."""
        for model, version, executor in self._service.executors():
            for _ in executor.newly_lost(self._margin_s):
                log.error(
                    "model %r version %r: a call outlived its deadline by %.1f s; its thread is "
                    "lost (put a timeout inside predict())",
                    model,
                    version,
                    self._margin_s,
                )
                if self._listener is not None:
                    self._listener.call_lost(model, version)
        rss = resident_memory_bytes()
        if self._listener is not None:
            self._listener.resident_memory_bytes(rss)
        wedged = self._service.wedged()
        if wedged:
            self._retire(f"every thread of {wedged} is stuck in predict()")
        elif self._max_rss_bytes and rss > self._max_rss_bytes:
            self._retire(f"resident memory {rss >> 20} MiB is above server.max_rss_mb")

    def _retire(self, reason: str) -> None:
        if not self.live:
            return
        self.live = False
        log.error("worker %d retires: %s", os.getpid(), reason)
        if self._on_wedged is not None:
            self._on_wedged()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.check()
            except Exception:  # the watchdog must outlive anything it watches
                log.exception("watchdog round failed")


def resident_memory_bytes() -> int:
    """This process's resident set size (Linux ``/proc``; 0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")
