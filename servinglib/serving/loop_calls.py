"""A model call made on the event loop is cut off once it overruns a short limit.

The asyncio worker runs a quick unbatched model on its event loop (a thread hop costs more
than such a call). A model that was quick can still hang or slow down (a lock, a remote
call, a bug that loops): on the loop, that would stop every other request of the worker.
:func:`call_bounded` arms a one-shot ``SIGALRM`` timer around the call; when it fires
during the call, the handler raises :class:`LoopCallOverran` inside the model's code (a
``BaseException``, so that ``except Exception`` in a model does not swallow it). Python runs
signal handlers on the main thread, which is the event loop's thread in the asyncio worker;
elsewhere, or when another handler owns ``SIGALRM``, :func:`available` says no and calls
go to the model's threads instead.

A call held in C code that never returns to Python (no bytecode runs, no interrupted
system call) cannot be cut off this way; the worker's watchdog and gunicorn's timeout
remain for those.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

__all__ = ["LOOP_CALL_LIMIT_S", "LoopCallOverran", "available", "call_bounded", "run_on_loop"]

log = logging.getLogger("servinglib.serving.service")

T = TypeVar("T")

# A call that averaged under 200 us and now takes 50 ms is stuck or has changed: the loop
# stops for at most this long, once, before the model's calls move to its threads.
LOOP_CALL_LIMIT_S = 0.05


class _Alarm:
    """Whether a bounded call is running (the handler raises only then)."""

    armed = False


class LoopCallOverran(BaseException):
    """The call ran past its limit on the event loop and was interrupted."""


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    if _Alarm.armed:
        raise LoopCallOverran


def available() -> bool:
    """Whether calls on this thread can be cut off (main thread, ``SIGALRM`` free or ours)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    handler = signal.getsignal(signal.SIGALRM)
    if handler is _on_alarm:
        return True
    if handler not in (signal.SIG_DFL, None):
        return False  # the application uses SIGALRM itself
    signal.signal(signal.SIGALRM, _on_alarm)
    return True


def call_bounded(limit_s: float, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)``, interrupted with :class:`LoopCallOverran` after ``limit_s``.

    Call only where :func:`available` said yes. The overrun may also surface just after
    ``function`` returned (the timer fired as it did); the caller treats both alike.
    """
    _Alarm.armed = True
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        return function(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _Alarm.armed = False


def run_on_loop(
    model: str, version: str, function: Callable[..., T], *args: Any
) -> tuple[bool, T | None]:
    """``(True, function(*args))``, or ``(False, None)`` once it overran (logged, naming
    ``model`` and ``version``).

    The caller then runs the request again on the model's threads: the interrupted call's
    answer is lost, and ``predict`` is to be free of shared mutable state anyway.
    """
    try:
        return True, call_bounded(LOOP_CALL_LIMIT_S, function, *args)
    except LoopCallOverran:
        log.warning(
            "model %r version %r: a call took over %.0f ms on the event loop and was "
            "interrupted; it runs again on the model's threads, where its calls stay",
            model,
            version,
            LOOP_CALL_LIMIT_S * 1000,
        )
        return False, None
