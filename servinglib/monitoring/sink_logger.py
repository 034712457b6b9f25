"""A prediction log that streams to one sink (Kafka, Parquet) and spools to disk meanwhile.

It is a :class:`~servinglib.monitoring.prediction_log.PredictionLogger` (same sampling,
bounded buffer, oversize summaries, drain on close) whose writer thread turns records into
events (:mod:`~servinglib.monitoring.prediction_events`) and hands them to the sink. A batch
the sink refuses goes to the disk spool, and so does every later batch until the spool is
replayed, oldest first, so the sink receives records in the order they were logged. A
replay is tried after a backoff (0.5 s doubling to 10 s). A closing logger tries the
replay once more (for at most 5 s, whatever the backoff) and does not wait for a sink that
is down: what is left stays in the spool, logged with its count, and is never deleted
undelivered; a live worker adopts the spool of one that exited (at its start, then every
10 s), and the next start adopts what the last workers left.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol

from servinglib.config.sinks import LogSinkConfig
from servinglib.config.spec import PredictionLogConfig
from servinglib.monitoring.prediction_events import event_of
from servinglib.monitoring.prediction_log import PredictionLogger
from servinglib.monitoring.spool import Spool
from servinglib.serving.recording import AnsweredPrediction

__all__ = ["EventSink", "SinkListener", "SinkLogger"]

log = logging.getLogger("servinglib.prediction_log")

_BACKOFF_S = (0.5, 10.0)
_ADOPT_EVERY_S = 10.0  # how often a worker looks for the spool of a worker that exited
_CLOSE_REPLAY_S = 5.0  # how long a closing logger replays before leaving the rest spooled


class EventSink(Protocol):
    """A destination of prediction events."""

    def write_answers(self, answers: Sequence[AnsweredPrediction], source: str) -> None:
        """Store the event of every answer (:func:`event_of` with ``source``), or raise."""

    def write(self, events: Sequence[dict[str, Any]]) -> None:
        """Store every event (replayed from the spool), or raise."""

    def close(self) -> None:
        """Flush and release connections."""


class SinkListener(Protocol):
    """The metrics of a sink (``ServingMetrics`` implements it)."""

    def sink_records(self, sink: str, outcome: str, count: int) -> None:
        """Count records written, spooled, replayed or truncated."""

    def sink_dropped(self, sink: str, reason: str, count: int) -> None:
        """Count records lost: ``buffer_full``, ``spool_full`` or ``closed``."""

    def sink_spool(self, sink: str, spool_bytes: int, lag_s: float) -> None:
        """Set the spool's size and the age of its oldest record."""


class SinkLogger(PredictionLogger):
    """Logs to ``sink`` through a bounded buffer and a disk spool (see the module)."""

    def __init__(
        self, config: LogSinkConfig, sink: EventSink, source: str, listener: SinkListener
    ) -> None:
        self.name = config.name
        self._events = sink  # also self._sink: the base class closes it
        self._source = source
        self._listener = listener
        self._spool = Spool(config.spool_dir, config.spool_max_bytes)
        self._next_try = self._next_adopt = 0.0
        self._close_by: float | None = None  # when a closing logger stops replaying
        self._backoff = _BACKOFF_S[0]
        name = config.name
        for reason in ("buffer_full", "spool_full"):  # series at 0 from the start, for alerts
            listener.sink_dropped(name, reason, 0)
        super().__init__(
            PredictionLogConfig(url=None, **config.buffer),
            sink,
            on_dropped=lambda n: listener.sink_dropped(name, "buffer_full", n),
            on_written=lambda n: listener.sink_records(name, "written", n),
            on_truncated=lambda n: listener.sink_records(name, "truncated", n),
        )

    def _write(self, batch: list[AnsweredPrediction]) -> None:
        closing = self._closed.is_set()
        try:
            if time.monotonic() >= self._next_adopt and not closing:
                self._spool.adopt()
                self._next_adopt = time.monotonic() + _ADOPT_EVERY_S
            if self._spool.pending:
                self._replay(closing)
        except Exception:  # the writer thread must live on: what it holds is spooled
            log.exception("prediction sink %s: spool replay failed", self.name)
        if batch and (self._spool.pending or not self._sent(batch)):
            self._spill([event_of(record, self._source) for record in batch])
        if closing and self._spool.pending:
            log.warning(
                "prediction sink %s: %d records (%d bytes) not delivered stay in the spool %s; "
                "the next start (or a live worker) replays them",
                self.name,
                self._spool.records,
                self._spool.bytes,
                self._spool.directory,
            )
        self._listener.sink_spool(self.name, self._spool.bytes, self._spool.oldest_age_s())

    def _sent(self, batch: list[AnsweredPrediction]) -> bool:
        try:
            self._events.write_answers(batch, self._source)
        except Exception as e:
            self._failed(e)
            return False
        self._on_written(len(batch))
        return True

    def _failed(self, error: Exception) -> None:
        log.warning("prediction sink %s: %s; spooling until it is back", self.name, error)
        self._next_try = time.monotonic() + self._backoff
        self._backoff = min(_BACKOFF_S[1], self._backoff * 2)

    def _replay(self, closing: bool = False) -> None:
        """Send spooled segments oldest first while the sink takes them. A closing logger
        tries once more whatever the backoff, for at most ``_CLOSE_REPLAY_S``."""
        now = time.monotonic()
        if closing:
            if self._close_by is None:
                self._close_by = now + _CLOSE_REPLAY_S
            deadline = self._close_by
        elif now < self._next_try:
            return
        else:
            deadline = float("inf")
        while self._spool.pending and time.monotonic() < deadline:
            events = self._spool.head()
            if not events:
                continue
            try:
                self._events.write(events)
            except Exception as e:
                self._failed(e)
                return
            self._spool.pop()
            self._listener.sink_records(self.name, "replayed", len(events))
        if not self._spool.pending:
            self._backoff = _BACKOFF_S[0]
            log.info("prediction sink %s: spool replayed", self.name)

    def _spill(self, events: list[dict[str, Any]]) -> None:
        try:
            kept = self._spool.append(events)
        except OSError:
            log.exception("prediction sink %s: cannot write its spool", self.name)
            kept = False
        if kept:
            self._listener.sink_records(self.name, "spooled", len(events))
        else:
            self._listener.sink_dropped(self.name, "spool_full", len(events))
