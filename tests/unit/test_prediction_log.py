"""servinglib.monitoring.prediction_log: bounded, batched, lossless on close."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servinglib.config.spec import PredictionLogConfig
from servinglib.monitoring.prediction_log import PredictionLogger, SqliteSink, open_sink, row_of
from servinglib.monitoring.prediction_log_schema import SCHEMA_VERSION
from servinglib.serving.recording import AnsweredPrediction

needs_postgres = pytest.mark.skipif(
    not os.environ.get("SERVINGLIB_TEST_POSTGRES_URL"),
    reason="set SERVINGLIB_TEST_POSTGRES_URL to a PostgreSQL database (.ci/run does)",
)


def first_writes_together(url: str, workers: int, answer: AnsweredPrediction) -> None:
    """``workers`` new sinks on ``url`` write ``answer`` at the same moment."""
    sinks = [open_sink(url) for _ in range(workers)]
    start = threading.Barrier(workers)

    def first_write(sink: Any) -> None:
        start.wait(timeout=30)
        sink.write([row_of(answer)])

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(first_write, sinks))
    for sink in sinks:
        sink.close()


def record(i: int, shadow_of: str | None = None) -> AnsweredPrediction:
    return AnsweredPrediction(
        f"r{i}", "eta", "2", {"x": i}, {"y": np.float32(i)}, 1.5, shadow_of=shadow_of
    )


def rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as connection:
        return connection.execute(
            "SELECT request_id, model, version, shadow_of, features, output, latency_ms FROM predictions ORDER BY id"
        ).fetchall()


def test_every_accepted_record_is_written_by_close(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    written: list[int] = []
    logger = PredictionLogger(
        PredictionLogConfig(url=f"sqlite:///{path}", batch_size=7, flush_interval_ms=10_000),
        open_sink(f"sqlite:///{path}"),
        on_written=written.append,
    )
    for i in range(50):
        assert logger.record(record(i))
    logger.close()
    stored = rows(path)
    assert len(stored) == 50
    assert sum(written) == 50
    assert max(written) <= 7
    first = stored[0]
    assert first[:4] == ("r0", "eta", "2", None)
    assert json.loads(first[4]) == {"x": 0}
    assert json.loads(first[5]) == {"y": 0.0}
    assert not logger.record(record(99)), "records after close are refused"
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_flush_interval_writes_without_close(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    logger = PredictionLogger(
        PredictionLogConfig(url="", flush_interval_ms=20), SqliteSink(str(path))
    )
    logger.record(record(1))
    deadline = time.monotonic() + 10
    found: list[tuple[Any, ...]] = []
    while time.monotonic() < deadline and not found:
        time.sleep(0.02)
        try:
            found = rows(path)
        except sqlite3.OperationalError:  # the writer is still creating the table
            found = []
    assert len(found) == 1
    logger.close()


class BlockingSink:
    """A sink that holds the writer until released, then remembers every row."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()  # the writer is inside write()
        self.rows: list[tuple[Any, ...]] = []

    def write(self, batch: Sequence[tuple[Any, ...]]) -> None:
        self.entered.set()
        self.release.wait(30)
        self.rows.extend(batch)

    def close(self) -> None:
        pass


def test_full_buffer_drops_and_counts_without_blocking() -> None:
    sink = BlockingSink()
    dropped: list[int] = []
    logger = PredictionLogger(
        PredictionLogConfig(url="", max_buffer=5, batch_size=1, flush_interval_ms=1),
        sink,
        on_dropped=dropped.append,
    )
    logger.record(record(0))
    assert sink.entered.wait(30)  # the writer took record 0 and blocks in the sink
    started = time.perf_counter()
    accepted = sum(logger.record(record(i)) for i in range(1, 21))
    # Blocking would mean waiting for the release (30 s); dropping takes microseconds.
    assert time.perf_counter() - started < 5
    assert accepted == 5
    assert sum(dropped) == 15
    sink.release.set()
    logger.close()
    assert len(sink.rows) == 6


class FlakySink(BlockingSink):
    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def write(self, batch: Sequence[tuple[Any, ...]]) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("database went away")
        self.rows.extend(batch)


def test_failed_writes_are_retried() -> None:
    sink = FlakySink(failures=2)
    logger = PredictionLogger(PredictionLogConfig(url="", flush_interval_ms=5), sink)
    for i in range(3):
        logger.record(record(i))
    logger.close()
    assert [row[0] for row in sink.rows] == ["r0", "r1", "r2"]


def test_a_sink_that_stays_down_drops_and_counts() -> None:
    sink = FlakySink(failures=100)
    dropped: list[int] = []
    logger = PredictionLogger(
        PredictionLogConfig(url="", flush_interval_ms=5), sink, on_dropped=dropped.append
    )
    logger.record(record(0))
    logger.close()
    assert sum(dropped) == 1


@needs_postgres
@pytest.mark.services
def test_postgres_sink() -> None:
    import psycopg

    url = os.environ["SERVINGLIB_TEST_POSTGRES_URL"]
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS predictions")
    logger = PredictionLogger(PredictionLogConfig(url=url, batch_size=10), open_sink(url))
    for i in range(25):
        logger.record(record(i, shadow_of="1" if i % 5 == 0 else None))
    logger.close()
    with psycopg.connect(url) as connection:
        count, shadows = connection.execute(
            "SELECT count(*), count(shadow_of) FROM predictions"
        ).fetchone()
    assert (count, shadows) == (25, 5)


@needs_postgres
@pytest.mark.services
def test_postgres_table_is_created_once_by_workers_starting_together() -> None:
    import psycopg

    url = os.environ["SERVINGLIB_TEST_POSTGRES_URL"]
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS predictions")
    first_writes_together(url, 8, record(0))  # DuplicateTable / UniqueViolation would raise
    with psycopg.connect(url) as connection:
        (count,) = connection.execute("SELECT count(*) FROM predictions").fetchone()
    assert count == 8


def test_oversized_records_are_summarized_and_the_buffer_is_bounded_in_bytes(
    tmp_path: Path,
) -> None:
    truncated: list[int] = []
    dropped: list[int] = []
    blocked = threading.Event()

    class SlowSink:
        def __init__(self) -> None:
            self.rows: list[tuple[Any, ...]] = []

        def write(self, rows: Sequence[tuple[Any, ...]]) -> None:
            blocked.wait(30)
            self.rows.extend(rows)

        def close(self) -> None:
            pass

    sink = SlowSink()
    config = PredictionLogConfig(
        url="", max_buffer_bytes=1 << 20, max_record_bytes=64 << 10, flush_interval_ms=5
    )
    logger = PredictionLogger(
        config, sink, on_dropped=dropped.append, on_truncated=truncated.append
    )
    big = np.zeros(1 << 20, dtype=np.float64)  # 8 MiB
    for i in range(200):  # each kept record is about 2 KiB of small features
        logger.record(
            AnsweredPrediction(f"r{i}", "m", "1", {"x": [1.0] * 200}, {"y": 1}, 1.0, logged_at=0.0)
        )
    assert logger.record(AnsweredPrediction("big", "m", "1", big, {"y": 1}, 1.0, logged_at=0.0))
    assert sum(truncated) == 1
    for i in range(2000):  # about 4 MiB more than the buffer may hold while the sink is stuck
        logger.record(
            AnsweredPrediction(f"s{i}", "m", "1", {"x": [1.0] * 200}, {"y": 1}, 1.0, logged_at=0.0)
        )
    assert sum(dropped) > 0
    blocked.set()
    logger.close()
    kept = {row[0]: row for row in sink.rows}
    assert len(kept) + sum(dropped) == 2201
    summary = json.loads(kept["big"][5])
    assert summary == {
        "truncated": True,
        "type": "ndarray",
        "approx_bytes": 8 << 20,
        "shape": [1 << 20],
    }


OLD_TABLE = """CREATE TABLE predictions (id {id_type}, request_id TEXT NOT NULL,
logged_at DOUBLE PRECISION NOT NULL, model TEXT NOT NULL, version TEXT NOT NULL,
shadow_of TEXT, features TEXT NOT NULL, output TEXT NOT NULL,
latency_ms DOUBLE PRECISION NOT NULL)"""  # as schema version 1 created it
OLD_ROW = "INSERT INTO predictions (request_id, logged_at, model, version, features, output, latency_ms) VALUES ('old', 0, 'eta', '1', '{}', '{}', 1)"


def traced(i: int) -> AnsweredPrediction:
    return dataclasses.replace(record(i), trace_id=f"{i:032x}", span_id=f"{i:016x}")


def test_sqlite_log_of_an_older_release_gains_trace_id(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    with sqlite3.connect(path) as connection:
        connection.execute(OLD_TABLE.format(id_type="INTEGER PRIMARY KEY AUTOINCREMENT"))
        connection.execute(OLD_ROW)
    start = threading.Barrier(4)

    def worker(_: int) -> None:  # workers starting together, a connection each
        sink = SqliteSink(str(path))
        start.wait(timeout=30)
        sink.write([row_of(traced(7)), row_of(record(8))])
        sink.close()

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(worker, range(4)))  # "duplicate column name" would raise here
    with sqlite3.connect(path) as connection:
        found = connection.execute(
            "SELECT request_id, trace_id FROM predictions ORDER BY id"
        ).fetchall()
        (version,) = connection.execute("PRAGMA user_version").fetchone()
    assert found == [("old", None)] + [("r7", f"{7:032x}"), ("r8", None)] * 4
    assert version == SCHEMA_VERSION == 2


@needs_postgres
@pytest.mark.services
def test_postgres_log_of_an_older_release_gains_trace_id() -> None:
    import psycopg

    url = os.environ["SERVINGLIB_TEST_POSTGRES_URL"]
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS predictions, servinglib_schema")
        connection.execute(OLD_TABLE.format(id_type="BIGSERIAL PRIMARY KEY"))
        connection.execute(OLD_ROW)
    first_writes_together(url, 4, traced(7))  # DuplicateColumn would raise
    with psycopg.connect(url) as connection:
        found = connection.execute(
            "SELECT request_id, trace_id FROM predictions ORDER BY id"
        ).fetchall()
        versions = connection.execute("SELECT version FROM servinglib_schema").fetchall()
    assert found == [("old", None)] + [("r7", f"{7:032x}")] * 4
    assert versions == [(SCHEMA_VERSION,)]
