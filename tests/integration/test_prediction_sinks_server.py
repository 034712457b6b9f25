"""Prediction sinks under a real gunicorn with 2 workers: Kafka (a real Tansu broker) and
the Parquet lake. Delivery to Kafka is at least once; the event ``id`` is the dedup key."""

from __future__ import annotations

import json
import os
import signal
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import LiveServer, launch, run_cli, stop, worker_pids
from tests.integration.test_shadow_traffic_server import metric_values, write_service

pytestmark = pytest.mark.integration

SHADOW = "    shadow:\n      - {version: '5', sample_rate: 1.0}\n"
EXECUTOR = "shadow_executor: {max_concurrency: 4, max_queue: 10000}\n"


def kafka_service(tmp_path: Path, broker: Any, *sinks: str) -> Path:
    entries = "".join(
        f"      - {{type: kafka, bootstrap_servers: '{broker.bootstrap}', {sink}}}\n"
        for sink in sinks
    )
    return write_service(
        tmp_path, SHADOW, EXECUTOR + "monitoring:\n  prediction_log:\n    sinks:\n" + entries
    )


def infer(url: str, i: int) -> tuple[int, float]:
    """Status and seconds of one request ``req-i`` (0: refused, the server is stopping)."""
    started = time.perf_counter()
    try:
        response = requests.post(
            f"{url}/infer",
            json={"model_id": "scorer", "features": {"x": i + 1}},
            headers={"x-request-id": f"req-{i}", "Connection": "close"},
            timeout=30,
        )
    except requests.ConnectionError:
        return 0, 0.0
    return response.status_code, time.perf_counter() - started


def events(broker: Any, topic: str) -> list[dict[str, Any]]:
    return [json.loads(message.value()) for message in broker.messages(topic)]


def total(url: str, name: str, **labels: str) -> float:
    return sum(
        value
        for key, value in metric_values(url, name).items()
        if all((k, v) in key for k, v in labels.items())
    )


def window_p95s(answers: list[tuple[int, float]], window: int = 50) -> list[float]:
    """The p95 latency of each run of ``window`` consecutive answers."""
    latencies = [seconds for _, seconds in answers]
    chunks = [latencies[i : i + window] for i in range(0, len(latencies) - window + 1, window)]
    return [sorted(chunk)[int(window * 0.95)] for chunk in chunks]


def wait_for(condition: Any, what: str, timeout_s: float = 60) -> Any:
    """The first true value of ``condition()``, polled until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout_s} s")
        time.sleep(0.1)
    return value


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT", "SIGQUIT"])
def test_every_answer_is_in_kafka_exactly_once_after_a_signal(
    tmp_path: Path, kafka_broker: Any, signum: str
) -> None:
    topic = kafka_broker.topic()
    config = kafka_service(tmp_path, kafka_broker, f"topic: {topic}")
    server = launch(config, tmp_path, "--workers", "2")
    answered: list[str] = []

    def one(i: int) -> None:
        if infer(server.url, i)[0] == 200:
            answered.append(f"req-{i}")

    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            futures = [pool.submit(one, i) for i in range(600)]
            wait_for(lambda: len(answered) >= 150, "150 answers")
            server.process.send_signal(getattr(signal, signum))  # mid-load
            for future in futures:
                future.result()
        server.process.wait(timeout=60)
    finally:
        stop(server.process)
    assert server.process.returncode == 0, server.log()[-3000:]
    found = events(kafka_broker, topic)
    ids = Counter(event["id"] for event in found)
    assert [i for i, n in ids.items() if n > 1] == []  # no failure here: exactly once
    primary = sorted(e["data"]["request_id"] for e in found if e["data"]["shadow_of"] is None)
    shadows = sorted(e["data"]["request_id"] for e in found if e["data"]["shadow_of"] == "1")
    assert primary == sorted(answered), f"{len(primary)} events for {len(answered)} answers"
    assert shadows == sorted(answered)  # every answer's shadow copy was drained and logged
    print(f"figures: {signum}: {len(answered)} answers, {len(found)} events, 0 duplicates")


def test_a_broker_outage_spools_then_delivers_everything_and_a_full_spool_counts(
    tmp_path: Path, kafka_broker: Any
) -> None:
    topic, tight = kafka_broker.topic(), kafka_broker.topic()
    config = kafka_service(
        tmp_path,
        kafka_broker,
        f"topic: {topic}, delivery_timeout_ms: 2000",
        f"name: tight, topic: {tight}, delivery_timeout_ms: 2000, spool_max_bytes: 1024",
    )
    server = launch(config, tmp_path, "--workers", "2")
    results: dict[str, list[tuple[int, float]]] = {"before": [], "outage": [], "after": []}
    phase = ["before"]
    stopping = threading.Event()

    sent: list[str] = []

    def load(offset: int) -> None:
        i = offset
        while not stopping.is_set():
            results[phase[0]].append(infer(server.url, i))
            sent.append(f"req-{i}")
            i += 4

    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            for offset in range(4):
                pool.submit(load, offset)
            wait_for(lambda: len(results["before"]) >= 200, "200 answers before the outage")
            with kafka_broker.outage():
                phase[0] = "outage"
                wait_for(
                    lambda: (
                        total(
                            server.url,
                            "servinglib_prediction_sink_records_total",
                            sink="kafka",
                            outcome="spooled",
                        )
                        >= 100
                        and total(
                            server.url,
                            "servinglib_prediction_sink_dropped_total",
                            sink="tight",
                            reason="spool_full",
                        )
                        >= 1
                        and len(results["outage"]) >= 200
                    ),
                    "spooling during the outage",
                )
                outage_end = time.monotonic()
            phase[0] = "after"
            wait_for(lambda: len(results["after"]) >= 200, "200 answers after the outage")
            stopping.set()
        spooled = total(
            server.url, "servinglib_prediction_sink_records_total", sink="kafka", outcome="spooled"
        )
        wait_for(
            lambda: (
                total(
                    server.url,
                    "servinglib_prediction_sink_records_total",
                    sink="kafka",
                    outcome="replayed",
                )
                >= spooled
            ),
            "the replay of the spool",
        )
        replayed_in = time.monotonic() - outage_end
        # the gauge is set when a writer ends its cycle, after the replayed count: wait for it
        wait_for(
            lambda: total(server.url, "servinglib_prediction_sink_spool_bytes", sink="kafka") == 0,
            "an empty spool",
        )
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=60)
    finally:
        stop(server.process)
    statuses = Counter(status for phase_results in results.values() for status, _ in phase_results)
    assert set(statuses) == {200}, statuses  # serving never waited for the broker
    p95 = {name: window_p95s(r) for name, r in results.items()}
    typical = {name: statistics.median(values) for name, values in p95.items()}
    around = p95["before"] + p95["after"]
    baseline = statistics.median(around)
    # The machine's load drifts during a run (other tests, other servers): one p95 over the
    # outage against one before it compares two moments as much as two states. So each
    # phase is cut into windows of 50 answers, and the median of the outage windows' p95s
    # is compared with the windows before and after it, which surround it in time. What
    # this test guards is that serving never waits for the broker: a request that did would
    # take the 2 s delivery timeout. On a loaded machine the outage's own spooling work
    # moves the p95 by more than 10 % of a few milliseconds, so the bound here is half again
    # the slowest surrounding window, or 50 ms over their median; the 10 % bar is measured
    # side by side on a quiet machine (benchmarks/prediction_sinks.py --only outage-p95).
    allowed = max(1.5 * max(around), baseline + 0.050)
    assert typical["outage"] <= allowed, (p95, baseline)
    answered = set(sent)  # every one answered 200 (above)
    found = events(kafka_broker, topic)
    primary = Counter(e["id"] for e in found if e["data"]["shadow_of"] is None)
    assert {i.split("/")[0] for i in primary} == answered  # none lost
    duplicates = sum(n - 1 for n in primary.values())
    print(
        f"figures: outage {len(results['outage'])} answers, spooled {spooled:.0f}, replayed "
        f"{replayed_in:.1f} s after, {duplicates} duplicates; median window p95 ms "
        + ", ".join(f"{k} {v * 1000:.1f}" for k, v in typical.items())
    )


def writers(lake: Path) -> set[int]:
    """The pids of the workers that wrote lake files (``part-<time_ns>-<pid>-<n>``)."""
    return {int(path.name.split("-")[2]) for path in lake.rglob("part-*.parquet")}


def test_parquet_lake_survives_kill_9_and_feeds_profile_from_log(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    config = write_service(
        tmp_path,
        "",
        "monitoring:\n  prediction_log:\n    sinks:\n"
        "      - {type: parquet, url: lake, flush_interval_ms: 20, batch_size: 20}\n",
    )
    server: LiveServer = launch(config, tmp_path, "--workers", "2")
    lake = tmp_path / "lake"
    try:
        answered = 0
        for round_ in range(2):  # kill -9 a worker while it writes files, then serve on
            with ThreadPoolExecutor(max_workers=8) as pool:
                futures = [pool.submit(infer, server.url, round_ * 1000 + i) for i in range(200)]
                # The victim is a worker seen writing (its pid is in the file names): one
                # killed before its first write would lose everything it had answered.
                victim = wait_for(lambda: writers(lake) & set(worker_pids(server)), "a lake file")
                os.kill(min(victim), signal.SIGKILL)
                answered += sum(f.result()[0] == 200 for f in futures)
            wait_for(lambda: len(worker_pids(server)) == 2, "the replacement worker", 120)
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=60)
    finally:
        stop(server.process)
    files = sorted(lake.rglob("*.parquet"))
    rows = sum(pq.read_table(path).num_rows for path in files)  # each file is whole
    assert answered * 0.5 < rows <= answered  # a killed worker loses its memory buffer
    result = run_cli(
        "profile",
        "--config",
        str(config),
        "--model",
        "scorer",
        "--version",
        "1",
        "--from-log",
        "1h",
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr
    profile = json.loads((tmp_path / "models" / "scorer" / "1" / "profile.json").read_text())
    assert profile["source"] == "prediction log, last 3600 s"
    assert {f["name"]: f["count"] for f in profile["fields"]}["x"] == rows
    print(f"figures: {len(files)} files, {rows} rows of {answered} answers after 2 kill -9")


def test_an_s3_lake_on_the_session_store_types_features_and_feeds_profile_from_log(
    tmp_path: Path, s3_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    s3fs = pytest.importorskip("s3fs")
    for key, value in s3_store.env.items():  # the server, the CLI and s3fs here read them
        monkeypatch.setenv(key, value)
    s3_store.client.create_bucket(Bucket="predictions-lake")
    config = write_service(
        tmp_path,
        "    input_schema: {type: object, properties: {x: {type: number}}}\n",
        "monitoring:\n  prediction_log:\n    sinks:\n"
        "      - {type: parquet, url: 's3://predictions-lake/log', flush_interval_ms: 20}\n",
    )
    server = launch(config, tmp_path, "--workers", "1")
    try:
        answered = sum(infer(server.url, i)[0] == 200 for i in range(30))  # x: 1 ... 30
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=60)
    finally:
        stop(server.process)
    assert answered == 30
    fs = s3fs.S3FileSystem()
    files = fs.glob("predictions-lake/log/model=scorer/version=1/date=*/hour=*/*.parquet")
    assert files, fs.find("predictions-lake")
    tables = [pq.read_table(path, filesystem=fs) for path in files]
    assert {t.schema.field("feature_x").type for t in tables} == {pa.float64()}
    xs = sorted(x for t in tables for x in t.column("feature_x").to_pylist())
    assert xs == [float(i) for i in range(1, 31)]  # declared number: ints logged as doubles
    assert all(t.column("inputs").null_count == t.num_rows for t in tables)
    result = run_cli(
        "profile",
        *("--config", str(config), "--model", "scorer", "--version", "1"),
        *("--from-log", "1h", "--no-progress"),
    )
    assert result.returncode == 0, result.stderr
    profile = json.loads((tmp_path / "models" / "scorer" / "1" / "profile.json").read_text())
    assert {f["name"]: f["count"] for f in profile["fields"]}["x"] == 30
    print(f"figures: {len(files)} lake files on s3, 30 rows, feature_x double")
