"""The prediction log's in-memory buffer: bounded in records and bytes, cheap to fill.

Requests append under a short uncontended lock and never block. The writer thread is woken
once per full batch (the append that makes ``batch_size`` records waiting), else by its
own timer: never once per record. A wake-up per record (as ``queue.Queue`` does on every
``put``) made the writer thread take the GIL from the event loop for each answer, and cost
more CPU than writing the record to Kafka.

Example::

    buffer = RecordBuffer(max_records=10_000, max_bytes=64 << 20, batch_size=500)
    buffer.put(record, size)               # request path: True, or False when full/closed
    batch, last = buffer.take(0.2)         # writer: a batch, or what came within 0.2 s
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, TypeVar

__all__ = ["RecordBuffer"]

T = TypeVar("T")


class RecordBuffer(Generic[T]):
    """Records waiting for the writer, with their estimated sizes in bytes."""

    def __init__(self, max_records: int, max_bytes: int, batch_size: int) -> None:
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._batch_size = batch_size
        # Sizes beside the records, not in a tuple with each: a tuple per record is one
        # more object the garbage collector tracks (and walks) while the record waits.
        self._items: deque[T] = deque()
        self._sizes: deque[int] = deque()
        self._bytes = 0
        self._lock = threading.Lock()
        self._ready = threading.Event()  # set when a batch is full or the buffer closes
        self._closed = False
        self.wakeups = 0  # how often a put woke the writer (once per full batch)

    @property
    def bytes(self) -> int:
        """Estimated bytes of the records waiting."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T, size: int) -> bool:
        """Append ``item`` of ``size`` bytes; False when the buffer is full or closed."""
        with self._lock:
            if (
                self._closed
                or len(self._items) >= self._max_records
                or self._bytes + size > self._max_bytes
            ):
                return False
            self._items.append(item)
            self._sizes.append(size)
            self._bytes += size
            full = len(self._items) == self._batch_size
            if full:
                self.wakeups += 1
        if full:
            self._ready.set()
        return True

    def take(self, timeout_s: float) -> tuple[list[T], bool]:
        """Up to ``batch_size`` records, once that many wait or after ``timeout_s`` (at
        once when closed); True with the last records of a closed buffer (nothing can be
        added after them)."""
        if not self._closed and len(self._items) < self._batch_size:
            self._ready.wait(timeout_s)
        self._ready.clear()
        with self._lock:
            if len(self._items) <= self._batch_size:
                taken = list(self._items)
                self._items.clear()
                self._sizes.clear()
                self._bytes = 0
                return taken, self._closed
            taken = [self._items.popleft() for _ in range(self._batch_size)]
            self._bytes -= sum(self._sizes.popleft() for _ in range(self._batch_size))
        return taken, False

    def close(self) -> None:
        """Refuse further records and wake the writer to take what is left."""
        with self._lock:
            self._closed = True
        self._ready.set()
