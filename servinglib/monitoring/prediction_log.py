"""The prediction log: a sampled record of answered requests, written off the request path.

Requests only put a record in a bounded in-memory buffer
(:class:`~servinglib.monitoring.record_buffer.RecordBuffer`: never blocks, never wakes the
writer per record). A writer thread takes up to ``batch_size`` records, or what arrived
within ``flush_interval_ms``, and writes them in one transaction. When the buffer is full,
the record is dropped and counted. :meth:`PredictionLogger.close` (called on graceful
shutdown) drains the buffer: nothing accepted is lost.

Sinks: SQLite in WAL mode (embedded default) and PostgreSQL via psycopg 3.
"""

from __future__ import annotations

import json
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from servinglib.config.spec import PredictionLogConfig
from servinglib.errors import ConfigError
from servinglib.monitoring.prediction_log_schema import (
    insert_sql,
    prepare_postgres,
    prepare_sqlite,
)
from servinglib.monitoring.record_buffer import RecordBuffer
from servinglib.monitoring.record_size import approx_bytes, summary
from servinglib.serving.recording import AnsweredPrediction
from servinglib.wire import jsonbytes
from servinglib.wire.jsonbytes import to_plain

__all__ = [
    "PostgresSink",
    "PredictionLogger",
    "SqliteSink",
    "open_sink",
    "row_of",
]

log = logging.getLogger("servinglib.prediction_log")


def row_of(answer: AnsweredPrediction) -> tuple[Any, ...]:
    """``answer`` as a database row of :data:`COLUMNS` (features and output as JSON text)."""
    return (
        answer.request_id,
        answer.logged_at,
        answer.model,
        answer.version,
        answer.shadow_of,
        _json_text(answer.features),
        _json_text(answer.output),
        answer.latency_ms,
        answer.trace_id,
    )


def _json_text(value: Any) -> str:
    """JSON text of a logged value; NaN and Infinity are kept as JavaScript literals."""
    try:
        return jsonbytes.dumps(value, default=str).decode()
    except jsonbytes.NonFiniteError:
        return json.dumps(to_plain(value), default=str)


class Sink(Protocol):
    """Where batches go; used only from the writer thread."""

    def write(self, rows: Sequence[Any]) -> None:
        """Write rows (or events) at once; raise when they were not all stored."""

    def close(self) -> None:
        """Release the connection."""


_SQLITE_BUSY_S = 30.0


def _enable_wal(connection: sqlite3.Connection, path: str) -> None:
    """Switch ``path`` to WAL, retrying while other workers switch it at the same moment.

    Changing the journal mode needs the exclusive lock; SQLite answers "database is locked"
    at once, without its busy handler, when two connections try together (workers starting
    on a log an older release created in rollback mode).
    """
    deadline = time.monotonic() + _SQLITE_BUSY_S
    delay = 0.005
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() + delay > deadline:
                raise sqlite3.OperationalError(
                    f"prediction log {path}: cannot switch to WAL mode ({e}); another "
                    "process holds the database: stop it, or use a file of this service's own"
                ) from e
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


class SqliteSink:
    """SQLite in WAL mode, so readers never block the writer (one connection per worker)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._connection: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            connection = sqlite3.connect(self._path, timeout=_SQLITE_BUSY_S, isolation_level=None)
            _enable_wal(connection, self._path)
            connection.execute("PRAGMA synchronous=NORMAL")
            prepare_sqlite(connection)
            connection.isolation_level = "DEFERRED"  # one implicit transaction per write
            self._connection = connection
        return self._connection

    def write(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert ``rows`` in one transaction."""
        connection = self._connect()
        with connection:
            connection.executemany(
                insert_sql("?"),
                rows,
            )

    def close(self) -> None:
        """Close the connection."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class PostgresSink:
    """PostgreSQL through psycopg 3 (``pip install 'psycopg[binary]'``)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._connection: Any = None

    def _connect(self) -> Any:
        if self._connection is None:
            try:
                import psycopg
            except ImportError as e:
                raise ConfigError(
                    "a postgresql:// prediction log needs psycopg 3: "
                    "pip install 'servinglib[postgres]'"
                ) from e
            self._connection = psycopg.connect(self._url)
            prepare_postgres(self._connection)
        return self._connection

    def write(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert ``rows`` in one transaction."""
        connection = self._connect()
        with connection.transaction(), connection.cursor() as cursor:
            cursor.executemany(
                insert_sql("%s"),
                rows,
            )

    def close(self) -> None:
        """Close the connection."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def open_sink(url: str) -> Sink:
    """The sink for a ``sqlite:///`` or ``postgresql://`` URL."""
    if url.startswith("sqlite:///"):
        return SqliteSink(url.removeprefix("sqlite:///"))
    return PostgresSink(url)


_RETRIES = 5


class PredictionLogger:
    """Samples, buffers and writes prediction records without slowing requests.

    Example::

        logger = PredictionLogger(config.prediction_log, open_sink(config.prediction_log.url))
        if logger.sampled():
            logger.record(AnsweredPrediction(...))
        logger.close()   # on shutdown: drains the buffer
    """

    def __init__(
        self,
        config: PredictionLogConfig,
        sink: Sink,
        on_dropped: Callable[[int], None] = lambda n: None,
        on_written: Callable[[int], None] = lambda n: None,
        rng: Callable[[], float] = random.random,
        on_truncated: Callable[[int], None] = lambda n: None,
    ) -> None:
        self._config = config
        self._sink = sink
        self._on_dropped = on_dropped
        self._on_written = on_written
        self._on_truncated = on_truncated
        self._rng = rng
        self._max_record_bytes = config.max_record_bytes
        self._buffer: RecordBuffer[AnsweredPrediction] = RecordBuffer(
            config.max_buffer, config.max_buffer_bytes, config.batch_size
        )
        self._closed = threading.Event()
        self._thread = threading.Thread(
            target=self._write_loop, name="servinglib-prediction-log", daemon=True
        )
        self._thread.start()

    @property
    def sample_rate(self) -> float:
        """The fraction of requests this log keeps."""
        return self._config.sample_rate

    def sampled(self) -> bool:
        """Draw whether the next request is logged."""
        return self._config.sample_rate >= 1.0 or self._rng() < self._config.sample_rate

    def record(self, record: AnsweredPrediction) -> bool:
        """Queue ``record``; False (and counted) when the buffer is full or closed
        (an :class:`~servinglib.serving.recording.AnswerRecorder`).

        Features or an output larger than ``max_record_bytes`` are replaced by a summary
        (counted as truncated); the buffer holds at most ``max_buffer_bytes``.
        """
        features_bytes, output_bytes = approx_bytes(record.features), approx_bytes(record.output)
        if features_bytes > self._max_record_bytes or output_bytes > self._max_record_bytes:
            record, size = self._truncated(record, features_bytes, output_bytes)
        else:
            size = 256 + features_bytes + output_bytes
        if self._buffer.put(record, size):  # refused once closed (or full)
            return True
        self._on_dropped(1)
        return False

    def _truncated(
        self, record: AnsweredPrediction, features_bytes: int, output_bytes: int
    ) -> tuple[AnsweredPrediction, int]:
        """``record`` with its oversized features or output summarised, and its size."""
        limit = self._max_record_bytes
        features, output = record.features, record.output
        if features_bytes > limit:
            features, features_bytes = summary(features, features_bytes), 256
        if output_bytes > limit:
            output, output_bytes = summary(output, output_bytes), 256
        self._on_truncated(1)
        bounded = replace(record, features=features, output=output)
        return bounded, 256 + features_bytes + output_bytes

    def _write_loop(self) -> None:
        interval = self._config.flush_interval_ms / 1000
        last = False
        while not last:  # once closed, the buffer hands over everything it accepted
            batch, last = self._buffer.take(interval)
            self._write(batch)  # also when empty: a subclass may have background work
        self._sink.close()

    def _write(self, batch: list[AnsweredPrediction]) -> None:
        """Write ``batch`` in chunks; retry a failed chunk with backoff, then drop and count."""
        rows = [row_of(record) for record in batch]
        written = failures = 0
        while written < len(rows):
            chunk = rows[written : written + self._config.batch_size]
            try:
                self._sink.write(chunk)
            except Exception:
                failures += 1
                self._sink.close()
                if failures >= _RETRIES:
                    log.error(
                        "prediction log: %d records dropped after %d failed writes",
                        len(rows) - written,
                        failures,
                        exc_info=True,
                    )
                    self._on_dropped(len(rows) - written)
                    return
                log.warning(
                    "prediction log write failed (attempt %d of %d)",
                    failures,
                    _RETRIES,
                    exc_info=True,
                )
                time.sleep(min(2.0, 0.1 * 2**failures))
                continue
            written += len(chunk)
            self._on_written(len(chunk))

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop accepting records, write every queued one, then close the sink."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._buffer.close()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.error("prediction log writer did not finish within %.0f s", timeout_s)
