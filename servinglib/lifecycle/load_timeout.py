"""Loading a model version with a time limit (``load_timeout_s``)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from servinglib.errors import ServinglibError
from servinglib.model import Model

__all__ = ["LoadFailedError", "with_timeout"]


class LoadFailedError(ServinglibError):
    """Internal: a lifecycle step failed with a readable reason."""


def with_timeout(
    work: Callable[[], list[Model]], timeout_s: float, message: str, abandoned: threading.Event
) -> list[Model]:
    """Run ``work`` on a daemon thread; give up (it keeps running, unused) after ``timeout_s``."""
    result: list[list[Model]] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(work())
        except BaseException as e:
            error.append(e)

    thread = threading.Thread(target=target, name="servinglib-load", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        abandoned.set()
        raise LoadFailedError(message)
    if error:
        raise error[0]
    return result[0]
