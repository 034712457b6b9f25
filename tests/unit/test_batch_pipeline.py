"""prefetch: items in order from a thread, errors carried over, no thread left behind; the
stages of score_units side by side or in turn write the same parts."""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from servinglib.batch._features import FeatureSpec
from servinglib.batch._layout import OutputLayout
from servinglib.batch._loading import first_selftest_output, load_version, scorer_for
from servinglib.batch._local import overlaps_io
from servinglib.batch._parts import OutputDirectory, PartStats
from servinglib.batch._pipeline import prefetch, score_units
from servinglib.batch._source import WorkUnit, open_input

CONFIG = str(Path(__file__).parent.parent / "fixtures" / "batch" / "servinglib.yaml")


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


def _rows(n: int) -> list[dict[str, Any]]:
    # x = 13 poisons its model batch (the fixture model raises on it); row 7 holds NaN
    return [{"id": f"r{i:04d}", "x": i, "extra": [math.nan] if i == 7 else []} for i in range(n)]


@pytest.mark.parametrize("workers", [1, 2])
def test_reading_scoring_and_writing_in_turn_writes_the_same_parts(
    tmp_path: Path, workers: int
) -> None:
    schema = pa.schema([("id", pa.string()), ("x", pa.int64()), ("extra", pa.list_(pa.float64()))])
    path = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(_rows(300), schema), path, row_group_size=100)
    source = open_input(str(path))
    config, record = load_version(CONFIG, "summer", None, workers)
    layout = OutputLayout.from_example(first_selftest_output(record), "id", "string")
    scorer = scorer_for(config, record, FeatureSpec("id"), layout, 64)
    tables = {}
    for overlap in (True, False):
        out = OutputDirectory(tmp_path / f"out-{overlap}", "parquet")
        out.path.mkdir()
        written: list[tuple[int, int, int]] = []

        def done(unit: WorkUnit, stats: PartStats, written: list[Any] = written) -> None:
            written.append((unit.index, stats.rows, stats.errors))

        score_units(
            source,
            source.units,
            scorer,
            out,
            64,
            lambda rows, errors: None,
            done,
            overlap=overlap,
        )
        assert written == [(0, 100, 2), (1, 100, 0), (2, 100, 0)]
        tables[overlap] = pq.read_table(out.path)
    assert tables[False].equals(tables[True])
    assert tables[False].column("id").to_pylist() == [f"r{i:04d}" for i in range(300)]


def test_threads_overlap_reading_and_writing_only_with_a_core_to_spare() -> None:
    cores = len(os.sched_getaffinity(0))
    assert not overlaps_io(cores)
    assert overlaps_io(cores - 1) is (cores > 1)
