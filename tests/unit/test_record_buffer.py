"""servinglib.monitoring.record_buffer: the per-record path wakes nothing and writes no
metric; the writer is woken once per full batch, and nothing accepted is lost on close."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.config.sinks import LogSinkConfig
from servinglib.config.spec import PredictionLogConfig
from servinglib.monitoring.prediction_log import PredictionLogger
from servinglib.monitoring.record_buffer import RecordBuffer
from servinglib.monitoring.record_size import approx_bytes
from servinglib.monitoring.sink_logger import SinkLogger
from servinglib.serving.recording import AnsweredPrediction


def answer(i: int) -> AnsweredPrediction:
    return AnsweredPrediction(f"r{i}", "m", "1", {"values": [0.5] * 16}, {"sum": 8.0}, 1.0)


class Batches:
    """A sink that remembers the size of every write."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.wrote = threading.Event()

    def write(self, rows: Sequence[Any]) -> None:
        self.sizes.append(len(rows))
        self.wrote.set()

    def write_answers(self, answers: Sequence[AnsweredPrediction], source: str) -> None:
        self.write(answers)

    def close(self) -> None:
        pass


def test_the_writer_is_woken_once_per_full_batch_not_per_record() -> None:
    buffer: RecordBuffer[int] = RecordBuffer(max_records=10_000, max_bytes=1 << 30, batch_size=100)
    for i in range(1000):
        assert buffer.put(i, 300)
    assert buffer.wakeups == 1, "the put that filled a batch woke the writer, no other"
    assert len(buffer) == 1000
    assert buffer.bytes == 300_000
    taken = [buffer.take(60.0) for _ in range(10)]  # full batches: no waiting
    assert [len(batch) for batch, _ in taken] == [100] * 10
    assert [item for batch, _ in taken for item in batch] == list(range(1000))
    assert not any(last for _, last in taken)
    assert buffer.bytes == 0
    for i in range(250):
        buffer.put(i, 300)
    assert buffer.wakeups == 2, "an emptied buffer wakes the writer again at its next batch"


def test_bounds_refuse_without_blocking_and_close_hands_over_everything_in_batches() -> None:
    buffer: RecordBuffer[int] = RecordBuffer(max_records=250, max_bytes=1 << 30, batch_size=100)
    assert sum(buffer.put(i, 1) for i in range(300)) == 250
    small: RecordBuffer[int] = RecordBuffer(max_records=10, max_bytes=1000, batch_size=5)
    assert small.put(0, 600)
    assert not small.put(1, 600), "bounded in bytes too"
    buffer.close()
    assert not buffer.put(999, 1), "closed: refused"
    batches = [buffer.take(60.0), buffer.take(60.0), buffer.take(60.0)]  # closed: no waiting
    assert [(len(batch), last) for batch, last in batches] == [
        (100, False),
        (100, False),
        (50, True),
    ]


def test_the_logger_writes_per_batch_and_its_request_path_counts_nothing() -> None:
    sink = Batches()
    written: list[int] = []
    dropped: list[int] = []
    logger = PredictionLogger(
        PredictionLogConfig(url=None, batch_size=100, flush_interval_ms=60_000),
        sink,
        on_written=written.append,
        on_dropped=dropped.append,
    )
    for i in range(250):
        assert logger.record(answer(i))
    assert sink.wrote.wait(30), "a full batch is written without waiting for the timer"
    assert logger._buffer.wakeups <= 2, "at most once per full batch, never per record"
    logger.close()
    assert sorted(sink.sizes) == [50, 100, 100]
    assert written == sink.sizes, "one metric update per batch written"
    assert dropped == []


class Calls:
    """A SinkListener that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.written = 0

    def sink_records(self, sink: str, outcome: str, count: int) -> None:
        self.calls += 1
        self.written += count if outcome == "written" else 0

    def sink_dropped(self, sink: str, reason: str, count: int) -> None:
        self.calls += 1

    def sink_spool(self, sink: str, spool_bytes: int, lag_s: float) -> None:
        self.calls += 1


def test_a_sink_loggers_metrics_are_updated_per_batch(tmp_path: Path) -> None:
    sink, calls = Batches(), Calls()
    config = LogSinkConfig(
        "kafka", "kafka", "t", tmp_path, buffer={"batch_size": 500, "flush_interval_ms": 60_000}
    )
    logger = SinkLogger(config, sink, "servinglib/test", calls)
    at_start = calls.calls  # the dropped series, published at 0
    for i in range(2000):
        assert logger.record(answer(i))
    logger.close()
    assert sum(sink.sizes) == calls.written == 2000
    assert max(sink.sizes) == 500
    # written and the spool's gauges, once per write: never once per record
    assert calls.calls - at_start <= 2 * len(sink.sizes) + 2


def test_size_estimates_of_plain_values() -> None:
    assert approx_bytes({"values": [0.5] * 16}) == 158
    assert approx_bytes([1.0] * 1000) == 9002
    assert approx_bytes([[1.0] * 10] * 100) == 9302
    assert approx_bytes((1, "a")) == 15
    assert approx_bytes({"a": [{"b": "xx", "c": [1, 2, None]}] * 100, 3: np.zeros(3)}) == 4638
    assert approx_bytes(np.float32(1)) == 4
    assert approx_bytes(b"abc") == 5
