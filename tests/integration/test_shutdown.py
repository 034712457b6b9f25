"""Graceful shutdown does not wait for calls the server already gave up on.

A model call still running after its request was answered 504 has nobody left to answer:
SIGINT or SIGTERM to the master must not wait for it (nor for the watchdog's margin, nor
the graceful timeout), only for the requests that can still be answered and the prediction
log's rows of the answered ones.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from tests.conftest import launch, stop
from tests.integration.test_reliability import reliability_service

pytestmark = pytest.mark.integration

ABANDONED = 40
# Hung calls answered 504 at 500 ms stay "not lost" for the watchdog all along (its margin is
# far longer than the test), and the graceful timeout is the default 30 s: an exit within
# EXIT_S waited for neither.
SHARED_HANGER = """  - name: shared
    class: models/misbehaving/model.py:Misbehaving
    repository: models/misbehaving
    default_version: "1"
    deadline_ms: 500
  - name: ensemble
    repository: models/misbehaving
    default_version: "1"
    deadline_ms: 500
    ensemble:
      "1":
        members: [{model: shared}, {model: shared, name: twin}]
        combiner: vote
"""
EXIT_S = 5.0


def _service(tmp_path: Path) -> tuple[Path, Path]:
    database = tmp_path / "predictions.db"
    config = reliability_service(tmp_path, SHARED_HANGER)
    config.write_text(
        config.read_text().replace("watchdog_margin_s: 1.0", "watchdog_margin_s: 600")
        + f"monitoring:\n  prediction_log: {{url: 'sqlite:///{database}', sample_rate: 1.0, "
        "flush_interval_ms: 60000, batch_size: 10000}\n"  # rows are written at shutdown
    )
    return config, database


def _post(url: str, model: str, features: dict[str, object], request_id: str) -> int:
    """One request on its own connection (a kept-alive one would hold the worker for the
    keep-alive linger of a stopping worker, which this test does not measure)."""
    response = requests.post(
        f"{url}/infer",
        json={"model_id": model, "features": features},
        headers={"x-request-id": request_id, "Connection": "close"},
        timeout=60,
    )
    return response.status_code


@pytest.mark.parametrize(
    ("signum", "worker", "model"),
    [
        ("SIGINT", "asyncio", "shared"),
        ("SIGINT", "gthread", "shared"),
        ("SIGTERM", "asyncio", "shared"),
        ("SIGTERM", "gthread", "shared"),
        # An ensemble's members run beside each other on step threads: hung there too.
        ("SIGINT", "asyncio", "ensemble"),
        ("SIGTERM", "gthread", "ensemble"),
    ],
)
def test_a_signal_does_not_wait_for_abandoned_calls(
    tmp_path: Path, signum: str, worker: str, model: str
) -> None:
    config, database = _service(tmp_path)
    server = launch(config, tmp_path, "--workers", "2", "--worker", worker)
    try:
        with ThreadPoolExecutor(max_workers=ABANDONED) as pool:
            hung = list(
                pool.map(
                    lambda i: _post(server.url, model, {"hang": True}, f"hang-{i}"),
                    range(ABANDONED),
                )
            )
        statuses = Counter(hung)
        assert set(statuses) <= {503, 504}, statuses  # every hung call was answered
        assert statuses[504] >= 1, statuses
        answered = [
            f"ok-{i}" for i in range(50) if _post(server.url, "steady", {}, f"ok-{i}") == 200
        ]
        assert len(answered) == 50  # the other model answers meanwhile
        assert (
            "thread is lost" not in server.log()
        )  # the hung calls are still running, not yet lost
        stopped_at = time.monotonic()
        server.process.send_signal(getattr(signal, signum))
        server.process.wait(timeout=60)
        took = time.monotonic() - stopped_at
    finally:
        stop(server.process)
    print(f"figures: {signum} {worker} {model}, {ABANDONED} abandoned calls: exit {took:.2f} s")
    assert server.process.returncode == 0, server.log()
    assert took < EXIT_S, f"exit took {took:.1f} s:\n{server.log()[-3000:]}"
    with sqlite3.connect(database) as db:
        logged = {row[0] for row in db.execute("SELECT request_id FROM predictions")}
    assert set(answered) <= logged, f"{len(set(answered) - logged)} answered requests lost"
