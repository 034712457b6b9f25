"""Live counts of one version in one process, kept in time slots, readable by every worker.

Under gunicorn each worker writes its counts into its own memory-mapped file
(``<PROMETHEUS_MULTIPROC_DIR>/drift/<model>/<version>/<profile>.<pid>.counts``), the same
way prometheus_client keeps multiprocess metrics. Whichever worker answers a drift query
sums every worker's file, so scores cover the whole server. Without a multiprocess
directory the table lives in memory and covers this process.

A table is ``slots`` rows of int64: column 0 holds the slot number (wall time divided by
the slot length), the others hold counts. A row is zeroed when its slot comes round again,
so the table has a fixed size however long the server runs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["CountsTable", "WindowCounts", "read_window", "table_path", "table_pattern"]

_DTYPE = np.int64


@dataclass(frozen=True)
class WindowCounts:
    """Counts summed over every worker and every slot in the window."""

    counts: np.ndarray
    workers: int  # processes whose counts fall in the window
    slots: int  # time slots in the window


class CountsTable:
    """One process's slot table; ``add`` counts into the current slot."""

    def __init__(
        self,
        columns: int,
        slots: int,
        slot_seconds: float,
        path: Path | None,
        clock: Callable[[], float],
    ) -> None:
        self._slot_seconds = slot_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self.path = path
        shape = (slots, columns + 1)
        if path is None:
            self._table: np.ndarray = np.zeros(shape, dtype=_DTYPE)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._table = np.memmap(path, dtype=_DTYPE, mode="w+", shape=shape)
            self._table[:, 0] = -1
        self._slots = slots
        self._rows = self._table.view(np.ndarray)  # plain views: no memmap bookkeeping

    def add(self, counts: np.ndarray) -> None:
        """Add ``counts`` (one per column past the slot column) to the current slot."""
        slot = int(self._clock() // self._slot_seconds)
        row = self._rows[slot % self._slots]
        with self._lock:
            if row[0] != slot:
                row[1:] = 0
                row[0] = slot
            row[1:] += counts

    def snapshot(self) -> np.ndarray:
        """A copy of the table (this process)."""
        with self._lock:
            return np.array(self._table)


def read_window(
    own: CountsTable,
    pattern: str,
    slots: int,
    slot_seconds: float,
    max_requests: int | None,
    request_column: int,
    now: float,
) -> WindowCounts:
    """Sum every process's table over the window ending now.

    Args:
        own: this process's table (read directly; other tables come from their files).
        pattern: glob of the version's files in ``own.path``'s directory.
        slots: the window's length in slots.
        slot_seconds: the slot length.
        max_requests: keep only the newest slots needed to hold this many requests.
        request_column: the column counting requests.
        now: wall time.
    """
    tables = [own.snapshot()]
    if own.path is not None:
        width = tables[0].shape[1]
        for path in sorted(own.path.parent.glob(pattern)):
            if path != own.path:
                table = _read_file(path, width)
                if table is not None:
                    tables.append(table)
    current = int(now // slot_seconds)
    by_slot: dict[int, np.ndarray] = {}
    workers = 0
    for table in tables:
        live = table[(table[:, 0] > current - slots) & (table[:, 0] <= current)]
        if live.shape[0] and live[:, 1:].any():
            workers += 1
        for row in live:
            slot = int(row[0])
            by_slot[slot] = by_slot.get(slot, 0) + row[1:]
    total = np.zeros(tables[0].shape[1] - 1, dtype=_DTYPE)
    used = 0
    for slot in sorted(by_slot, reverse=True):
        if max_requests is not None and total[request_column - 1] >= max_requests:
            break
        total += by_slot[slot]
        used += 1
    return WindowCounts(total, workers, used)


def _read_file(path: Path, width: int) -> np.ndarray | None:
    """Another worker's table, or None when it is not (yet) a whole table."""
    try:
        raw = np.fromfile(path, dtype=_DTYPE)
    except OSError:
        return None
    if raw.size == 0 or raw.size % width:
        return None
    return raw.reshape(-1, width)


def table_path(directory: str | None, model: str, version: str, fingerprint: str) -> Path | None:
    """This process's table file, or None outside multiprocess mode."""
    if not directory:
        return None
    return Path(directory) / "drift" / model / version / f"{fingerprint}.{os.getpid()}.counts"


def table_pattern(fingerprint: str) -> str:
    """Glob of every process's table of a version, in the directory of this process's."""
    return f"{fingerprint}.*.counts"
