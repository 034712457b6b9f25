"""prefetch: items in order from a thread, errors carried over, no thread left behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from servinglib.batch._pipeline import prefetch


def _running(name: str) -> bool:
    return any(thread.name == name for thread in threading.enumerate())


def test_items_arrive_in_order_from_another_thread() -> None:
    threads: set[str] = set()

    def numbers() -> Iterator[int]:
        for i in range(100):
            threads.add(threading.current_thread().name)
            yield i

    assert list(prefetch(numbers(), depth=3, name="numbers")) == list(range(100))
    assert threads == {"numbers"}


def test_what_the_producer_raises_is_raised_after_the_items_before_it() -> None:
    def failing() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("row group 3 is corrupt")

    items = prefetch(failing())
    assert [next(items), next(items)] == [1, 2]
    with pytest.raises(ValueError, match="row group 3 is corrupt"):
        next(items)


def test_closing_early_stops_the_producer_and_closes_its_iterator() -> None:
    closed = threading.Event()
    produced: list[int] = []

    def endless() -> Iterator[int]:
        try:
            i = 0
            while True:
                produced.append(i)
                yield i
                i += 1
        finally:
            closed.set()

    items = prefetch(endless(), depth=2, name="endless")
    assert [next(items) for _ in range(5)] == [0, 1, 2, 3, 4]
    items.close()
    assert closed.is_set()  # close() returns once the producer thread has ended
    assert not _running("endless")
    assert len(produced) <= 5 + 2 + 1  # at most depth items (and one in hand) ahead


def test_a_consumer_error_stops_nested_stages() -> None:
    stopped: list[str] = []

    def source() -> Iterator[int]:
        try:
            yield from range(1_000_000)
        finally:
            stopped.append("source")

    def doubled() -> Iterator[int]:
        inner = prefetch(source(), name="read")
        try:
            for item in inner:
                yield 2 * item
        finally:
            inner.close()
            stopped.append("doubled")

    def write(items: Iterator[int]) -> None:
        for item in items:
            if item == 10:
                raise RuntimeError("disk full")

    outer = prefetch(doubled(), name="score")
    with pytest.raises(RuntimeError, match="disk full"):
        write(outer)
    outer.close()
    assert stopped == ["source", "doubled"]
    assert not _running("read")
    assert not _running("score")
