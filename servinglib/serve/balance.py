"""Keep-alive connections spread evenly over the workers of one server.

Workers share one listening socket, and the worker that wakes first accepts every pending
connection: when a client pool opens 8 connections at once, or while a sibling is still
loading its models, one worker can end up with all of them. Keep-alive connections never
move by themselves, so that worker does all the work while the other idles (measured: 734
instead of 1,100 MiniLM requests/s at concurrency 8).

Each worker counts its open connections in a table shared by all workers (created in the
master, inherited on fork). A worker holding clearly more than the least busy live worker
answers its next request with ``Connection: close``; the client reconnects, and the idle
worker, waiting in ``accept``, is the likely one to take the new connection.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
from typing import Any

__all__ = ["ConnectionBalance"]


class ConnectionBalance:
    """Per-worker open-connection counts in shared memory, and the decision to shed one.

    Example (one object created before fork; each worker calls ``join`` after it)::

        balance = ConnectionBalance()
        balance.join()
        balance.opened()
        if balance.crowded():
            ...  # answer with Connection: close
    """

    def __init__(self, slots: int) -> None:
        self._slots = slots
        # (pid, open connections) per worker; each worker writes only its own counter.
        self._table: Any = multiprocessing.RawArray(ctypes.c_int64, 2 * slots)
        self._lock = multiprocessing.Lock()
        self._mine = -1

    def join(self) -> None:
        """Claim a slot for this process (a free one, or one of a worker that is gone)."""
        pid = os.getpid()
        with self._lock:
            for slot in range(self._slots):
                owner = self._table[2 * slot]
                if owner in (0, pid) or not _alive(owner):
                    self._table[2 * slot] = pid
                    self._table[2 * slot + 1] = 0
                    self._mine = slot
                    return
        self._mine = -1  # more workers than slots: this one does not take part

    def joined(self) -> ConnectionBalance:
        """:meth:`join`, then this table."""
        self.join()
        return self

    def leave(self) -> None:
        """Give the slot back (worker exit)."""
        if self._mine >= 0:
            with self._lock:
                self._table[2 * self._mine] = 0
                self._table[2 * self._mine + 1] = 0
            self._mine = -1

    def opened(self) -> None:
        """This worker accepted a connection."""
        if self._mine >= 0:
            self._table[2 * self._mine + 1] += 1

    def closed(self) -> None:
        """One of this worker's connections closed."""
        if self._mine >= 0:
            self._table[2 * self._mine + 1] -= 1

    def crowded(self) -> bool:
        """Whether this worker holds clearly more connections than the least busy one.

        "Clearly": at least 2 more, and at least an eighth more, so that a balanced server
        (differences of one) never sheds a connection.
        """
        mine = self._mine
        if mine < 0:
            return False
        table = self._table
        own = table[2 * mine + 1]
        if own < 2:
            return False
        fewest, slot = own, -1
        for other in range(self._slots):
            if other != mine and table[2 * other] and table[2 * other + 1] < fewest:
                fewest, slot = table[2 * other + 1], other
        if slot < 0 or own - fewest < max(2, own // 8):
            return False
        owner = table[2 * slot]
        if not _alive(owner):  # killed without leaving: free its slot, decide next time
            with self._lock:
                if table[2 * slot] == owner:
                    table[2 * slot] = 0
                    table[2 * slot + 1] = 0
            return False
        return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
