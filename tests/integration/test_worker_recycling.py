"""server.max_requests (+ jitter) replaces workers gracefully under a real gunicorn."""

from __future__ import annotations

import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import LiveServer
from tests.integration.test_reliability import reliability_service

pytestmark = pytest.mark.integration

MAX_REQUESTS, JITTER, REQUESTS = 40, 10, 240


@pytest.mark.parametrize("worker", ["asyncio", "gthread"])
def test_max_requests_recycles_workers_without_losing_a_request(
    tmp_path: Path, start_server: Any, worker: str
) -> None:
    server: LiveServer = start_server(
        reliability_service(tmp_path),
        "--workers",
        "2",
        "--worker",
        worker,
        env={
            "SERVINGLIB_MAX_REQUESTS": str(MAX_REQUESTS),
            "SERVINGLIB_MAX_REQUESTS_JITTER": str(JITTER),
        },
    )

    def one(i: int) -> tuple[int, int | str]:
        try:  # a new connection each time: a proxy's pool would retry a closed idle one
            response = requests.post(
                f"{server.url}/infer",
                json={"model_id": "steady", "features": {"pid": True}},
                headers={"Connection": "close", "x-request-id": f"r{i}"},
                timeout=60,
            )
        except requests.RequestException as e:
            return 0, type(e).__name__
        return response.status_code, response.json()["output"]["pid"]

    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(one, range(REQUESTS)))
    failures = Counter(str(detail) for status, detail in answers if status != 200)
    pids = [pid for status, pid in answers if status == 200]
    print(f"figures: {worker}: {len(pids)}/{REQUESTS} answered, {len(set(pids))} worker pids")
    assert not failures, failures  # no request lost while workers were replaced
    # 240 requests over two workers that each leave after 40-50: replacements answered.
    assert len(set(pids)) >= 3, Counter(pids)
    log = server.log()
    if worker == "asyncio":  # uvicorn names each worker's limit: max_requests + its jitter
        limits = [int(n) for n in re.findall(r"Maximum request limit of (\d+) exceeded", log)]
        assert limits, log[-3000:]
        assert all(MAX_REQUESTS <= n <= MAX_REQUESTS + JITTER for n in limits), limits
    else:
        assert "Autorestarting worker after current request" in log, log[-3000:]
    assert "Perhaps out of memory" not in log
    assert "WORKER TIMEOUT" not in log
    assert server.process.poll() is None  # the master carries on
    assert requests.get(f"{server.url}/readyz", timeout=10).status_code == 200
