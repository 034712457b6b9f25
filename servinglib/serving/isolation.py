"""Poison-input isolation: run a batch, and bisect it when it raises so only bad inputs fail.

Shared by the online batcher and batch prediction, so one bad row fails alone in both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["BatchAnswerError", "one_per_input", "run_isolating"]


class BatchAnswerError(RuntimeError):
    """``predict_batch`` did not return one result per input."""


def one_per_input(outputs: Sequence[Any], inputs: Sequence[Any]) -> Sequence[Any]:
    """``outputs``, once checked to hold one result per input.

    Raises:
        BatchAnswerError: naming both counts and the fix.
    """
    if len(outputs) != len(inputs):
        raise BatchAnswerError(
            f"predict_batch returned {len(outputs)} results for {len(inputs)} inputs; "
            "return one result per input, in order"
        )
    return outputs


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
        outputs = one_per_input(run_batch(payloads), payloads)
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
