"""Run the stages of a work unit side by side: read ahead, score, write behind.

pyarrow releases the GIL while it decodes and encodes Parquet, so reading the next chunk
and writing the last one can run on another core while this one scores: with a model that
answers in a few microseconds per row, Parquet I/O in the same thread is a fifth of the
job. :func:`prefetch` moves an iterator into a thread of its own, a few items ahead of its
consumer; memory stays bounded by that depth.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterator
from typing import TypeVar, cast

__all__ = ["prefetch"]

T = TypeVar("T")

_END = object()


class _Failed:
    """What the producer thread raised, carried to the consumer."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def prefetch(
    items: Iterator[T], depth: int = 2, name: str = "prefetch"
) -> Generator[T, None, None]:
    """Yield the items of ``items``, produced by a thread up to ``depth`` items ahead.

    What the producer raises (any ``BaseException``) is raised here, in order, after the
    items produced before it. Closing the generator early (or an exception in the
    consumer) stops the producer at its next item and waits for its thread to end, so no
    thread outlives the stage that started it.

    Example::

        for batch in prefetch(source.batches(unit, 8192)):
            ...  # the next batch is decoded while this one is scored
    """
    channel: queue.Queue[object] = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                channel.put(item)
                if stop.is_set():
                    return
            channel.put(_END)
        except BaseException as e:  # handed to the consumer, which raises it
            channel.put(_Failed(e))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = channel.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield cast(T, item)
    finally:
        stop.set()
        # the producer puts at most one more item (it checks ``stop`` after each put), so
        # emptying the queue once guarantees that put finds room and the thread ends
        while thread.is_alive():
            try:
                channel.get(timeout=0.05)
            except queue.Empty:
                continue
        thread.join()
