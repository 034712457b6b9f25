"""Score work units in stages that run side by side: read ahead, score, write behind.

pyarrow releases the GIL while it decodes and encodes Parquet, so reading the next chunk
and writing the last one can run on another core while this one scores: with a model that
answers in a few microseconds per row, Parquet I/O in the same thread is about a tenth of
the job. :func:`prefetch` moves an iterator into a thread of its own, a few items ahead of
its consumer; memory stays bounded by that depth. :func:`score_units` runs one such
pipeline over a stream of work units, so reading the next unit starts while the last
chunks of the previous one are scored and written; or, for workers that already occupy
every core, the same stages in turn in one thread.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import TypeVar, cast

import pyarrow as pa

from servinglib.batch._parts import OutputDirectory, PartStats
from servinglib.batch._scoring import BatchScorer
from servinglib.batch._source import InputSource, WorkUnit
from servinglib.errors import ServinglibError

__all__ = ["CHUNK_ROWS", "UnitFailedError", "prefetch", "score_unit", "score_units"]

CHUNK_ROWS = 8192  # rows read, validated, laid out and written at a time
# Scored chunks the writer may fall behind by. Its thread needs the GIL twice per chunk
# (woken by the queue, back from encoding) and waits up to the interpreter's switch
# interval (5 ms) each time for the scoring thread to yield it: with room for 2 chunks
# (25 ms of scoring each), those waits filled the queue and stalled scoring ~15 % of the
# time. An output chunk is small (tens of bytes a row), so 8 cost well under a MiB.
SCORED_DEPTH = 8

ProgressCallback = Callable[[int, int], None]

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


def _inline(items: Iterator[T]) -> Generator[T, None, None]:
    """``items`` in the calling thread, with :func:`prefetch`'s ``close`` semantics."""
    try:
        yield from items
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


class UnitFailedError(Exception):
    """Reading, scoring or writing one work unit failed; ``__cause__`` says why."""

    def __init__(self, unit: WorkUnit, error: BaseException) -> None:
        super().__init__(f"work unit {unit.index} ({unit.path}) failed: {error}")
        self.unit = unit


def score_units(
    source: InputSource,
    units: Iterable[WorkUnit],
    scorer: BatchScorer,
    out: OutputDirectory,
    batch_size: int,
    progress: ProgressCallback,
    done: Callable[[WorkUnit, PartStats], None] = lambda unit, stats: None,
    *,
    overlap: bool = True,
) -> None:
    """Score ``units`` in order, writing one part each; ``done(unit, stats)`` after each part.

    With ``overlap``, three stages run side by side: a thread reads and decodes chunks
    (taking the next unit from ``units`` once it has read the last one: a worker's queue is
    asked only then), a thread scores them (the only one that calls the model), and this
    thread writes the parts. Without it, this thread reads, scores and writes in turn: for
    workers that already occupy every core, where overlapping gains no core and the
    hand-offs between threads cost CPU. ``progress(rows, errors)`` runs after each scored
    chunk.

    Raises:
        UnitFailedError: naming the unit whose part could not be written, from the error
            of whichever stage failed; parts written before it are kept.
    """
    chunk = batch_size * max(1, CHUNK_ROWS // batch_size)  # whole model batches per chunk

    def read() -> Iterator[tuple[WorkUnit, pa.RecordBatch | None]]:
        for unit in units:
            yield unit, None  # every unit opens a part, even one without rows
            for batch in source.batches(unit, chunk):
                yield unit, batch

    def score() -> Iterator[tuple[WorkUnit, pa.Table | None]]:
        batches = prefetch(read(), name="batch-read") if overlap else _inline(read())
        offset = 0  # rows of the unit before this chunk: where its calls are published
        try:
            for unit, batch in batches:
                if batch is None:
                    offset = 0
                    yield unit, None
                    continue
                scorer.guard.locate(unit.index, offset)
                offset += batch.num_rows
                table = scorer.score(batch)
                progress(len(table), int(len(table) - table.column("error").null_count))
                yield unit, table
        finally:
            batches.close()

    scored = (
        prefetch(score(), depth=SCORED_DEPTH, name="batch-score") if overlap else _inline(score())
    )
    schema = scorer.layout.schema()
    try:
        for unit, items in itertools.groupby(scored, key=lambda item: item[0]):
            tables = (table for _, table in items if table is not None)
            try:
                stats = out.write_part(unit.index, schema, tables)
            except ServinglibError:
                raise  # the job's own verdict (too many error rows), not a failure of the unit
            except Exception as e:
                raise UnitFailedError(unit, e) from e
            done(unit, stats)
    finally:
        scored.close()


def score_unit(
    source: InputSource,
    unit: WorkUnit,
    scorer: BatchScorer,
    out: OutputDirectory,
    batch_size: int,
    progress: ProgressCallback,
) -> PartStats:
    """Score one work unit and write its part (:func:`score_units` of one unit)."""
    written: list[PartStats] = []
    score_units(
        source, [unit], scorer, out, batch_size, progress, lambda _, stats: written.append(stats)
    )
    return written[0]
