"""The trace id of a request's span, as exported over OTLP, in every prediction log: the
SQLite table, the Kafka CloudEvent (``traceparent`` and ``data.trace_id``) and the Parquet
lake, for its primary answer and its shadow copy; null where the request is not traced."""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import launch, stop
from tests.integration.test_tracing_server import FIXTURE, infer, of_trace, traceparent
from tests.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.integration


def test_the_otlp_trace_id_is_in_the_sql_log_kafka_and_the_lake(
    tmp_path: Path, otlp_receiver: OtlpReceiver, kafka_broker: Any
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    topic = kafka_broker.topic()
    shutil.copytree(FIXTURE, tmp_path / "service")
    config = tmp_path / "service" / "servinglib.yaml"
    config.write_text(
        config.read_text()
        + "monitoring:\n  prediction_log:\n"
        + f"    url: sqlite:///{tmp_path / 'log.db'}\n    flush_interval_ms: 20\n    sinks:\n"
        + f"      - {{type: kafka, topic: {topic}, bootstrap_servers: '{kafka_broker.bootstrap}'}}\n"
        + "      - {type: parquet, url: lake, flush_interval_ms: 20}\n"
    )
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": otlp_receiver.endpoint,
        "OTEL_SERVICE_NAME": "traced-log",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    server = launch(config, tmp_path, "--workers", "1", env=env)
    try:
        header, trace_id, _ = traceparent()
        traced = infer(server.url, "scorer", {"x": 2.0}, header)
        untraced = infer(server.url, "scorer", {"x": 3.0}, traceparent(sampled=False)[0])
        assert (traced.status_code, untraced.status_code) == (200, 200)
        spans = otlp_receiver.wait_for(
            "traced-log", lambda s: {"POST /infer", "shadow 2"} <= set(of_trace(s, trace_id))
        )
        server.process.send_signal(signal.SIGTERM)  # every log drains on exit
        server.process.wait(timeout=60)
    finally:
        stop(server.process)
    assert server.process.returncode == 0, server.log()[-3000:]
    trace = of_trace(spans, trace_id)
    (root,), (copy,) = trace["POST /infer"], trace["shadow 2"]
    ids = {traced.headers["x-request-id"]: trace_id, untraced.headers["x-request-id"]: None}
    with sqlite3.connect(tmp_path / "log.db") as connection:
        rows = connection.execute(
            "SELECT request_id, version, trace_id FROM predictions"
        ).fetchall()
    assert sorted(rows) == sorted((r, v, t) for r, t in ids.items() for v in ("1", "2"))
    events = {
        (e["data"]["request_id"], e["data"]["version"]): e
        for e in (json.loads(m.value()) for m in kafka_broker.messages(topic))
    }
    assert set(events) == {(r, v) for r in ids for v in ("1", "2")}
    request = traced.headers["x-request-id"]
    assert events[request, "1"]["traceparent"] == f"00-{trace_id}-{root.span_id}-01"
    assert events[request, "2"]["traceparent"] == f"00-{trace_id}-{copy.span_id}-01"
    for (r, _), event in events.items():
        assert event["data"]["trace_id"] == ids[r]
        assert ("traceparent" in event) == (ids[r] is not None)
    lake = [
        pq.read_table(p).to_pylist() for p in (tmp_path / "service" / "lake").rglob("*.parquet")
    ]
    found = sorted((row["request_id"], row["version"], row["trace_id"]) for t in lake for row in t)
    assert found == sorted(rows)
    print(f"figures: trace {trace_id} in 2 log rows, 2 Kafka events and 2 lake rows")
