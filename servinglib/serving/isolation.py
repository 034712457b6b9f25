"""Poison-input isolation: run a batch, and bisect it when it raises so only bad inputs fail.

Shared by the online batcher and batch prediction, so one bad row fails alone in both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["run_isolating"]


def run_isolating(
    run_batch: Callable[[list[Any]], Sequence[Any]],
    payloads: list[Any],
    executed: Callable[[int], None] | None = None,
) -> list[tuple[Any, BaseException | None]]:
    """Run ``payloads`` as one batch; when it raises, bisect so only poison inputs fail.

    Returns one ``(output, None)`` or ``(None, error)`` per payload, in order; ``executed``
    is told the size of every batch that succeeded.
    """
    try:
        outputs = run_batch(payloads)
        if len(outputs) != len(payloads):
            raise RuntimeError(
                f"predict_batch returned {len(outputs)} results for {len(payloads)} inputs"
            )
    except BaseException as e:
        if len(payloads) == 1:
            return [(None, e)]
        middle = len(payloads) // 2  # bisect: only the poison input ends up failing
        return run_isolating(run_batch, payloads[:middle], executed) + run_isolating(
            run_batch, payloads[middle:], executed
        )
    if executed is not None:
        executed(len(payloads))
    return [(output, None) for output in outputs]
