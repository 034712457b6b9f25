"""The Kafka sink through three broker outages in a row under load, 2 gunicorn workers: every
answered request's primary and shadow events reach Kafka (at least once, dedup key ``id``),
from the exit drain or, for what the drain could not deliver, from the spool the next start
replays."""

from __future__ import annotations

import json
import signal
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import launch, stop
from tests.integration.test_prediction_sinks_server import (
    events,
    infer,
    kafka_service,
    total,
    wait_for,
)

pytestmark = pytest.mark.integration

WINDOW = 50  # answers with the broker up between outages; records spooled in each outage


def spooled_ids(spool: Path) -> set[str]:
    """The event ids waiting in the spool's segments."""
    return {
        json.loads(line)["id"]
        for path in spool.glob("*.jsonl")
        for line in path.read_text().splitlines()
        if line
    }


def grown(read: Callable[[], float]) -> Callable[[], bool]:
    """True once ``read()`` is ``WINDOW`` above its value now."""
    start = read()
    return lambda: read() >= start + WINDOW


def expected_ids(answered: list[str]) -> set[str]:
    """The primary (version 1) and shadow (version 5) event ids of the answered requests."""
    return {f"{request}/scorer/{version}" for request in answered for version in ("1", "5")}


def test_three_broker_outages_under_load_lose_no_answered_prediction(
    tmp_path: Path, kafka_broker: Any
) -> None:
    topic = kafka_broker.topic()
    config = kafka_service(tmp_path, kafka_broker, f"topic: {topic}, delivery_timeout_ms: 1000")
    spool = tmp_path / ".servinglib-spool" / "kafka"
    server = launch(config, tmp_path, "--workers", "2")
    answered: list[str] = []
    stopping = threading.Event()

    def load(offset: int) -> None:
        i = offset
        while not stopping.is_set():
            if infer(server.url, i)[0] == 200:
                answered.append(f"req-{i}")
            i += 4

    def spooled() -> float:
        return total(
            server.url, "servinglib_prediction_sink_records_total", sink="kafka", outcome="spooled"
        )

    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            loads = [pool.submit(load, offset) for offset in range(4)]
            try:
                for cycle in range(3):
                    wait_for(grown(lambda: len(answered)), f"answers before outage {cycle}")
                    with kafka_broker.outage():
                        wait_for(grown(spooled), f"records spooled in outage {cycle}")
            finally:  # right after the third outage: the spool is still being replayed
                stopping.set()
            for future in loads:
                future.result()
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=60)
    finally:
        stop(server.process)
    assert server.process.returncode == 0, server.log()[-3000:]
    expected = expected_ids(answered)
    drained = Counter(event["id"] for event in events(kafka_broker, topic))
    left = spooled_ids(spool)
    # Shutdown delivers what it can and keeps the rest on disk, never drops it.
    lost = sorted(expected - set(drained) - left)
    assert not lost, (  # enough to tell a lost segment from a lost batch or a lost tail
        f"{len(lost)} of {len(expected)} events lost ({lost[:3]} .. {lost[-3:]}); last answered "
        f"{answered[-1]}; {len(drained)} in Kafka, {len(left)} spooled; server log:\n"
        + server.log()[-6000:]
    )
    restarted = bool(left)
    if restarted:  # the next start adopts the spool and replays it
        server = launch(config, tmp_path, "--workers", "2")
        try:
            wait_for(
                lambda: expected <= {event["id"] for event in events(kafka_broker, topic)},
                "the replay of the spool after a restart",
            )
            server.process.send_signal(signal.SIGTERM)
            server.process.wait(timeout=60)
        finally:
            stop(server.process)
        assert server.process.returncode == 0, server.log()[-3000:]
    found = Counter(event["id"] for event in events(kafka_broker, topic))
    assert expected <= set(found), sorted(expected - set(found))[:10]  # none lost
    assert not list(spool.glob("*.jsonl"))  # all delivered, nothing left behind
    duplicates = sum(n - 1 for n in found.values())
    print(
        f"figures: 3 outages, {len(answered)} answers, {len(expected)} events expected, "
        f"{sum(found.values())} in Kafka, {duplicates} duplicates, {len(left)} left in the "
        f"spool at exit{' (replayed by a restart)' if restarted else ''}"
    )
