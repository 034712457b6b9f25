"""Prediction sinks: the spool, Kafka (a real Tansu broker) and the Parquet lake."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from servinglib.config.sinks import LogSinkConfig
from servinglib.monitoring.drift.sources import read_prediction_log
from servinglib.monitoring.kafka_sink import KafkaSink
from servinglib.monitoring.parquet_sink import LAKE_COLUMNS, ParquetSink
from servinglib.monitoring.prediction_events import EVENT_TYPE, encode, event_of
from servinglib.monitoring.sink_logger import SinkLogger
from servinglib.monitoring.spool import Spool
from servinglib.serving.recording import AnsweredPrediction


class Counts:
    """A SinkListener that remembers what it was told."""

    def __init__(self) -> None:
        self.records: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.spool_bytes = 0
        self.lag_s = 0.0

    def sink_records(self, sink: str, outcome: str, count: int) -> None:
        self.records[outcome] = self.records.get(outcome, 0) + count

    def sink_dropped(self, sink: str, reason: str, count: int) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + count

    def sink_spool(self, sink: str, spool_bytes: int, lag_s: float) -> None:
        self.spool_bytes, self.lag_s = spool_bytes, lag_s


def record(
    i: int, shadow_of: str | None = None, logged_at: float | None = None
) -> AnsweredPrediction:
    return AnsweredPrediction(
        f"r{i}",
        "m",
        "2" if shadow_of else "1",
        {"x": float(i)},
        {"y": i * 2},
        1.5,
        shadow_of=shadow_of,
        logged_at=time.time() if logged_at is None else logged_at,
    )


def sink_config(tmp_path: Path, kind: str, target: str, **settings: Any) -> LogSinkConfig:
    buffer = {"flush_interval_ms": 20, "batch_size": 50}
    buffer.update({k: settings.pop(k) for k in list(settings) if k in ("max_buffer", "batch_size")})
    return LogSinkConfig(
        name=kind,
        kind=kind,
        target=target,
        spool_dir=tmp_path / "spool",
        spool_max_bytes=settings.pop("spool_max_bytes", 1 << 20),
        buffer=buffer,
        options=settings,
    )


def wait_until(condition: Any, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s} s"
        time.sleep(0.02)


class Switchable:
    """A sink that refuses batches while ``down`` is set (the logger is what is tested)."""

    def __init__(self) -> None:
        self.down = threading.Event()
        self.events: list[dict[str, Any]] = []

    def write_answers(self, answers: Sequence[AnsweredPrediction], source: str) -> None:
        self.write([event_of(answer, source) for answer in answers])

    def write(self, events: Sequence[dict[str, Any]]) -> None:
        if self.down.is_set():
            raise ConnectionError("sink unreachable")
        self.events.extend(events)

    def close(self) -> None:
        pass


def test_a_down_sink_spools_in_order_and_replays_when_back(tmp_path: Path) -> None:
    sink, counts = Switchable(), Counts()
    logger = SinkLogger(sink_config(tmp_path, "kafka", "t"), sink, "servinglib/test", counts)
    sink.down.set()
    for i in range(100):
        assert logger.record(record(i))
    wait_until(lambda: counts.records.get("spooled") == 100, "spooling")
    assert counts.spool_bytes > 0
    sink.down.clear()
    for i in range(100, 150):
        logger.record(record(i))
    wait_until(lambda: len(sink.events) == 150, "replay")
    logger.close()
    assert [e["data"]["request_id"] for e in sink.events] == [f"r{i}" for i in range(150)]
    # Records logged while the spool was still waiting for its replay went behind it.
    assert counts.records["replayed"] == counts.records["spooled"] >= 100
    assert counts.records["replayed"] + counts.records.get("written", 0) == 150
    assert not list((tmp_path / "spool").glob("*.jsonl"))


def test_a_full_spool_counts_what_it_drops(tmp_path: Path) -> None:
    sink, counts = Switchable(), Counts()
    config = sink_config(tmp_path, "kafka", "t", spool_max_bytes=4096, batch_size=5)
    logger = SinkLogger(config, sink, "servinglib/test", counts)
    sink.down.set()
    for i in range(200):
        logger.record(record(i))
    logger.close()
    spooled, dropped = counts.records.get("spooled", 0), counts.dropped.get("spool_full", 0)
    assert spooled + dropped == 200
    assert dropped > 0
    assert spooled > 0
    assert Spool(tmp_path / "other", 1).bytes == 0
    assert sum(p.stat().st_size for p in (tmp_path / "spool").glob("*.jsonl")) <= 4096


def test_a_dead_workers_spool_is_adopted_and_replayed(tmp_path: Path) -> None:
    sink, counts = Switchable(), Counts()
    config = sink_config(tmp_path, "kafka", "t")
    logger = SinkLogger(config, sink, "servinglib/test", counts)
    sink.down.set()
    for i in range(10):
        logger.record(record(i))
    logger.close()  # a closing logger does not wait for a down sink: it spools
    assert counts.records["spooled"] == 10
    dead = 2**22 + 12345  # above the default pid_max: no such process
    for path in (tmp_path / "spool").glob("*.jsonl"):
        path.rename(path.with_name(f"{path.stem.split('-')[0]}-{dead}.jsonl"))
    sink.down.clear()
    again = SinkLogger(config, sink, "servinglib/test", Counts())  # adopts at its start
    wait_until(lambda: len(sink.events) == 10, "replay of the adopted spool")
    again.close()
    assert [e["data"]["request_id"] for e in sink.events] == [f"r{i}" for i in range(10)]


def test_a_closing_logger_replays_its_spool_when_the_sink_is_back(tmp_path: Path) -> None:
    sink, counts = Switchable(), Counts()
    logger = SinkLogger(sink_config(tmp_path, "kafka", "t"), sink, "servinglib/test", counts)
    sink.down.set()
    for i in range(50):
        logger.record(record(i))
    wait_until(lambda: counts.records.get("spooled") == 50, "spooling")
    sink.down.clear()
    logger.record(record(50))
    logger.close()  # within the replay backoff: the exit drain replays the spool anyway
    assert [e["data"]["request_id"] for e in sink.events] == [f"r{i}" for i in range(51)]
    assert not list((tmp_path / "spool").glob("*.jsonl"))


def test_what_a_closing_logger_cannot_deliver_stays_spooled_for_the_next_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sink, counts = Switchable(), Counts()
    config = sink_config(tmp_path, "kafka", "t")
    logger = SinkLogger(config, sink, "servinglib/test", counts)
    sink.down.set()
    for i in range(30):
        logger.record(record(i))
    logger.close()
    assert counts.records["spooled"] == 30
    assert "30 records" in caplog.text
    assert "stay in the spool" in caplog.text
    sink.down.clear()
    # The next start may have the same pid (a container restart): it adopts the segments.
    again = SinkLogger(config, sink, "servinglib/test", Counts())
    wait_until(lambda: len(sink.events) == 30, "replay at the next start")
    again.close()
    assert [e["data"]["request_id"] for e in sink.events] == [f"r{i}" for i in range(30)]
    assert not list((tmp_path / "spool").glob("*.jsonl"))


def test_a_spool_segment_that_cannot_be_parsed_is_kept_aside(tmp_path: Path) -> None:
    spool = Spool(tmp_path, 1 << 20)
    assert spool.append([event_of(record(0), "s")])
    assert spool.append([event_of(record(1), "s")])
    first = sorted(tmp_path.glob("*.jsonl"))[0]
    first.write_text("{not json\n")
    assert [e["data"]["request_id"] for e in spool.head()] == ["r1"]
    assert (spool.pending, spool.records) == (1, 1)
    assert first.with_name(first.name + ".bad").exists()


def test_kafka_sink_delivers_cloudevents_keyed_by_request_id(
    tmp_path: Path, kafka_broker: Any
) -> None:
    topic = kafka_broker.topic()
    counts = Counts()
    config = sink_config(tmp_path, "kafka", topic, bootstrap_servers=kafka_broker.bootstrap)
    logger = SinkLogger(config, KafkaSink(topic, config.options), "servinglib/svc", counts)
    answers = [record(i, shadow_of="1" if i % 4 == 0 else None) for i in range(20)]
    for answer in answers:
        logger.record(answer)
    logger.close()
    assert counts.records["written"] == 20
    messages = kafka_broker.messages(topic)
    assert sorted(m.key().decode() for m in messages) == sorted(f"r{i}" for i in range(20))
    # The same bytes as the event encoded on its own (as the spool and a replay write it).
    sent = {m.key().decode(): m.value() for m in messages}
    assert all(sent[a.request_id] == encode(event_of(a, "servinglib/svc")) for a in answers)
    event = json.loads(next(m.value() for m in messages if m.key() == b"r4"))
    assert {k: event[k] for k in ("specversion", "type", "source", "id")} == {
        "specversion": "1.0",
        "type": EVENT_TYPE,
        "source": "servinglib/svc",
        "id": "r4/m/2",
    }
    assert event["time"].endswith("Z")
    data = event["data"]
    assert (data["model"], data["version"], data["shadow_of"]) == ("m", "2", "1")
    assert (data["inputs"], data["outputs"], data["latency_ms"]) == ({"x": 4.0}, {"y": 8}, 1.5)


def test_kafka_sink_spools_while_the_broker_is_unreachable(
    tmp_path: Path, kafka_broker: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    lines: list[logging.LogRecord] = []
    librdkafka = logging.getLogger("servinglib.prediction_log.librdkafka")
    handler = logging.Handler()
    handler.emit = lines.append  # type: ignore[method-assign]
    librdkafka.addHandler(handler)
    try:
        _spool_through_an_outage(tmp_path, kafka_broker)
    finally:
        librdkafka.removeHandler(handler)
    # librdkafka's reconnect lines: logged through servinglib, at most one per 30 s
    assert "%3|" not in capfd.readouterr().err
    assert 1 <= len(lines) <= 2, [line.getMessage() for line in lines]


def test_a_batch_meeting_an_unreachable_broker_fails_at_once_not_at_the_delivery_timeout() -> None:
    # While the writer waits for acknowledgements, a busy server's answers fill the memory
    # buffer: waiting out the delivery timeout for a broker that refuses loses records.
    from tests.conftest import free_port

    options = {"bootstrap_servers": f"127.0.0.1:{free_port()}", "delivery_timeout_ms": 30_000}
    sink = KafkaSink("predictions", options)
    started = time.monotonic()
    with pytest.raises(Exception, match="not acknowledged"):
        sink.write_answers([record(i) for i in range(50)], "servinglib/svc")
    took = time.monotonic() - started
    sink.close()
    print(f"figures: a batch for a refusing broker failed after {took:.1f} s")
    assert took < 15, f"the batch failed after {took:.1f} s: at the delivery timeout"


def _spool_through_an_outage(tmp_path: Path, kafka_broker: Any) -> None:
    topic = kafka_broker.topic()
    counts = Counts()
    config = sink_config(
        tmp_path, "kafka", topic, bootstrap_servers=kafka_broker.bootstrap, delivery_timeout_ms=1000
    )
    logger = SinkLogger(config, KafkaSink(topic, config.options), "servinglib/svc", counts)
    logger.record(record(0))
    wait_until(lambda: counts.records.get("written") == 1, "the first delivery")
    with kafka_broker.outage():
        for i in range(1, 60):
            logger.record(record(i))
        wait_until(lambda: counts.records.get("spooled", 0) >= 59, "spooling")
    wait_until(lambda: counts.records.get("replayed", 0) >= 59, "replay", timeout_s=60)
    logger.close()
    keys = [m.key().decode() for m in kafka_broker.messages(topic)]
    assert set(keys) == {f"r{i}" for i in range(60)}  # at least once: none lost
    print(f"figures: {len(keys) - 60} duplicates of 60 after a broker outage")


def test_parquet_lake_is_partitioned_and_read_by_pyarrow_duckdb_and_drift(
    tmp_path: Path,
) -> None:
    import duckdb
    import pyarrow.dataset as ds

    lake = tmp_path / "lake"
    counts = Counts()
    config = sink_config(tmp_path, "parquet", str(lake))
    logger = SinkLogger(config, ParquetSink(str(lake), {}), "servinglib/svc", counts)
    for i in range(30):
        logger.record(record(i, shadow_of="1" if i % 3 == 0 else None))
    logger.close()
    files = sorted(lake.rglob("*.parquet"))
    assert files
    assert all(not p.name.startswith(".") for p in files)
    assert {p.parent.relative_to(lake).parts[:2] for p in files} == {
        ("model=m", "version=1"),
        ("model=m", "version=2"),
    }
    date, hour = files[0].parent.parent.name, files[0].parent.name
    assert date.startswith("date=")
    assert hour.startswith("hour=")
    table = ds.dataset(str(lake), format="parquet", partitioning=None).to_table()
    assert table.schema.names == [name for name, _ in LAKE_COLUMNS] + ["feature_x"]
    assert table.column("inputs").null_count == 30  # every feature has a column
    assert table.num_rows == 30
    with duckdb.connect() as db:  # as the docs read it: partition keys stay text
        found = db.execute(
            "SELECT count(*), count(shadow_of), min(version), max(date), sum(latency_ms) "
            f"FROM read_parquet('{lake}/**/*.parquet', hive_types_autocast = false)"
        ).fetchone()
    assert found is not None
    assert found[:2] == (30, 10)
    assert found[2] == "1"
    assert found[4] == pytest.approx(45.0)
    rows = read_prediction_log(str(lake), "m", None, 3600)
    assert len(rows) == 20
    assert rows[0] == ("1", {"x": 1.0}, {"y": 2})
    assert read_prediction_log(str(lake), "m", "1", 3600, now=time.time() + 7200) == []
    assert os.listdir(tmp_path / "spool") == []


def test_sinks_are_configured_from_servinglib_yaml(tmp_path: Path) -> None:
    from servinglib.config.spec import load_config
    from servinglib.errors import ConfigError

    config = tmp_path / "servinglib.yaml"
    base = (
        "service: s\nmodels: [{name: m, class: m.py:M, repository: m, default_version: '1'}]\n"
        "monitoring:\n  prediction_log:\n    sinks:\n"
        "      - {type: kafka, topic: t, bootstrap_servers: 'k:9092', linger_ms: 5}\n"
    )
    (tmp_path / "m" / "1").mkdir(parents=True)
    config.write_text(base + "      - {type: parquet, url: lake, sample_rate: 0.5}\n")
    log = load_config(config).prediction_log
    assert log is not None
    assert log.url is None
    kafka, lake = log.sinks
    assert (kafka.name, kafka.target, kafka.options["linger_ms"]) == ("kafka", "t", 5)
    assert kafka.spool_dir == tmp_path / ".servinglib-spool/kafka"
    assert (lake.target, lake.buffer["sample_rate"]) == (str(tmp_path / "lake"), 0.5)
    assert log.read_url() == str(tmp_path / "lake")
    config.write_text(base + "      - {type: kafka, topic: u, bootstrap_servers: 'k:9092'}\n")
    with pytest.raises(ConfigError, match=r"sinks\[1\]: another sink is named 'kafka'"):
        load_config(config)


def test_lake_features_are_typed_columns_by_input_schema_else_by_file(tmp_path: Path) -> None:
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    lake = tmp_path / "lake"
    schema = {
        "type": "object",
        "properties": {
            "x": {"type": "number"},  # integers logged as 3 still make a double column
            "n": {"type": ["integer", "null"]},
            "tags": {"type": "array"},
        },
    }
    sink = ParquetSink(str(lake), {}, {"m": schema})

    def answer(i: int, version: str, features: Any) -> dict[str, Any]:
        return event_of(
            AnsweredPrediction(f"r{i}", "m", version, features, {"y": i}, 1.0),
            "servinglib/svc",
        )

    typed = [
        {"x": i, "n": i * 10, "city": f"c{i}", "tags": [i], "ok": i % 2 == 0} for i in range(4)
    ]
    typed[3] = {"x": 1.5, "city": "c3", "tags": [], "ok": True, "extra": {"deep": 1}}
    mixed = [{"n": 1, "free": 1}, {"n": "two", "free": 2.5}, {"n": 3, "free": 7}]
    sink.write([answer(i, "1", f) for i, f in enumerate(typed)])
    sink.write([answer(10 + i, "2", f) for i, f in enumerate(mixed)])
    sink.write([answer(20, "3", [[1.0, 2.0]])])  # not an object: all JSON

    (v1,) = lake.glob("model=m/version=1/*/*/*.parquet")
    table = pq.read_table(v1)
    assert {f.name: f.type for f in table.schema if f.name.startswith("feature_")} == {
        "feature_x": pa.float64(),  # declared number
        "feature_n": pa.int64(),  # declared integer (null allowed)
        "feature_city": pa.string(),  # not declared: inferred from the file
        "feature_ok": pa.bool_(),
    }  # tags (declared array) and extra (an object) stay JSON
    assert table.column("feature_n").to_pylist() == [0, 10, 20, None]
    assert [None if t is None else json.loads(t) for t in table.column("inputs").to_pylist()] == [
        {"tags": [0]},
        {"tags": [1]},
        {"tags": [2]},
        {"tags": [], "extra": {"deep": 1}},
    ]
    (v2,) = lake.glob("model=m/version=2/*/*/*.parquet")
    names = pq.read_schema(v2).names
    assert "feature_n" not in names  # an int and a str: no one type
    assert pq.read_schema(v2).field("feature_free").type == pa.float64()  # ints and floats
    with duckdb.connect() as db:
        found = db.execute(
            "SELECT version, sum(feature_x), max(feature_city), count(feature_free) FROM "
            f"read_parquet('{lake}/**/*.parquet', union_by_name = true, "
            "hive_types_autocast = false) GROUP BY version ORDER BY version"
        ).fetchall()
    assert found == [("1", 4.5, "c3", 0), ("2", None, None, 3), ("3", None, None, 0)]
    logged = {o["y"]: (v, f) for v, f, o in read_prediction_log(str(lake), "m", None, 60)}
    expected: dict[int, tuple[str, Any]] = {i: ("1", f) for i, f in enumerate(typed)}
    expected |= {10 + i: ("2", f) for i, f in enumerate(mixed)} | {20: ("3", [[1.0, 2.0]])}
    assert logged == expected  # features put back together (ints read back from doubles)


def test_a_traced_answer_carries_the_cloudevents_tracing_extension() -> None:
    traced = dataclasses.replace(record(1), trace_id="ab" * 16, span_id="cd" * 8)
    event = event_of(traced, "servinglib/svc")
    assert event["traceparent"] == f"00-{'ab' * 16}-{'cd' * 8}-01"
    assert event["data"]["trace_id"] == "ab" * 16
    untraced = event_of(record(1), "servinglib/svc")
    assert "traceparent" not in untraced
    assert untraced["data"]["trace_id"] is None
