"""SIGTERM as an exception while a command runs, so that every with-block cleans up.

Ctrl-C already raises ``KeyboardInterrupt``; SIGTERM's default action kills the process on
the spot, leaving staging and work directories behind. The CLI turns both into one line
and exit 130 or 143.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["Terminated", "terminate_cleanly"]


class Terminated(BaseException):
    """SIGTERM, raised where the command is so that every with-block cleans up."""


@contextmanager
def terminate_cleanly() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` while a command runs (main thread only)."""

    def raise_terminated(signum: int, frame: FrameType | None) -> None:
        raise Terminated

    try:
        previous = signal.signal(signal.SIGTERM, raise_terminated)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
