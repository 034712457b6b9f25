"""Model calls a batch worker publishes, so its parent can time them out.

Python cannot stop a thread stuck in ``predict_batch``; a process can be killed. So a
worker publishes each call in a slot of shared memory (when it started, which unit and
rows it holds) and the parent kills a worker whose call ran past ``--call-timeout-s``,
then gives its units to a fresh worker with those rows marked: the rows of a call of
several rows are called again one at a time (:meth:`CallGuard.slices`), and a row that
hangs alone becomes an error row and reaches the model no more (:meth:`CallGuard.preset`).
Publishing a call costs a few shared-memory writes, nothing beside a model call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["ANSWERED", "SLOT_SIZE", "STARTED", "CallGuard", "hung_rows", "timed_out_message"]

# the slot: when the running call started (0 when none), its unit, its first row and the
# row after its last (rows counted from the start of the unit), and calls answered so far
STARTED, UNIT, FIRST, STOP, ANSWERED = range(5)
SLOT_SIZE = 5


def timed_out_message(timeout_s: float) -> str:
    """The ``error`` column of a row whose call, with this row alone, ran past the timeout."""
    return (
        f"prediction timed out: predict_batch with this row alone ran past --call-timeout-s "
        f"{timeout_s:g} s; its worker process was replaced and the row is not scored again"
    )


def hung_rows(slot: Sequence[float], started: float) -> tuple[int, range] | None:
    """The unit and rows of the call that started at ``started``, if it still runs."""
    unit, first, stop = int(slot[UNIT]), int(slot[FIRST]), int(slot[STOP])
    if slot[STARTED] != started:  # the call ended meanwhile: the values may be the next one's
        return None
    return unit, range(first, stop)


class CallGuard:
    """A worker's side: publishes each model call; knows the rows that hung before.

    Without a slot (scoring in the job's own process) calls go straight to the model.
    """

    def __init__(self, slot: Any = None, timeout_s: float = 0.0) -> None:
        self._slot = slot
        self._timeout_s = timeout_s
        self.hung: dict[int, frozenset[int]] = {}  # unit -> rows not to score again
        self.suspect: dict[int, frozenset[int]] = {}  # unit -> rows to call one at a time
        self._unit = -1
        self._offset = 0

    @property
    def unit(self) -> int:
        """The unit of the chunk scored last (-1 before the first)."""
        return self._unit

    def locate(self, unit: int, offset: int) -> None:
        """The next chunk scored starts at row ``offset`` of unit ``unit``."""
        self._unit, self._offset = unit, offset

    def slices(self, positions: Sequence[int], batch_size: int) -> list[tuple[int, int]]:
        """(start, stop) of each call over ``positions`` (the chunk's rows still valid).

        Calls of ``batch_size`` rows, but a suspect row (one of a call that hung) is called
        alone: when it hangs again only it fails, and its neighbours are scored.
        """
        count = len(positions)
        suspect = self.suspect.get(self._unit)
        if not suspect or not any(self._offset + p in suspect for p in positions):
            return [(s, min(s + batch_size, count)) for s in range(0, count, batch_size)]
        slices: list[tuple[int, int]] = []
        start = 0
        for i, position in enumerate(positions):
            if self._offset + position in suspect:
                if start < i:
                    slices.append((start, i))
                slices.append((i, i + 1))
                start = i + 1
            elif i + 1 - start == batch_size:
                slices.append((start, i + 1))
                start = i + 1
        if start < count:
            slices.append((start, count))
        return slices

    def preset(self, rows: int) -> list[tuple[int, str]]:
        """(position, error) of the rows of the next chunk of ``rows`` rows that hung before."""
        hung = self.hung.get(self._unit)
        if not hung:
            return []
        message = timed_out_message(self._timeout_s)
        first = self._offset
        return [(row - first, message) for row in sorted(hung) if first <= row < first + rows]

    def call(
        self, predict: Callable[[list[Any]], Any], payloads: list[Any], where: Sequence[int]
    ) -> Any:
        """``predict(payloads)``, published as the rows ``where`` of the current chunk."""
        slot = self._slot
        if slot is None or not where:
            return predict(payloads)
        slot[UNIT] = self._unit
        slot[FIRST] = self._offset + where[0]
        slot[STOP] = self._offset + where[-1] + 1
        slot[STARTED] = time.monotonic()  # last: the parent reads the rest once this is set
        try:
            return predict(payloads)
        finally:
            slot[STARTED] = 0.0
            slot[ANSWERED] += 1

    def wrap(
        self, predict: Callable[[list[Any]], Any], where: Sequence[int]
    ) -> Callable[[list[Any]], Any]:
        """``predict`` published as the rows ``where`` (for the calls of a bisection)."""
        return lambda payloads: self.call(predict, payloads, where)
