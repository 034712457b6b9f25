"""No wedged workers: hung models, overload without a batcher, signals, under real gunicorn.

Each test runs ``servinglib serve --workers 2`` over the misbehaving fixture model
(tests/fixtures/reliability) and waits for conditions, never for a fixed time.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import LiveServer
from tests.integration.test_shadow_traffic_server import total, wait_for_metric

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent.parent / "fixtures" / "reliability"


def reliability_service(tmp_path: Path, extra_models: str = "") -> Path:
    """The fixture service copied into ``tmp_path``, with ``extra_models`` appended."""
    shutil.copytree(FIXTURE / "models", tmp_path / "models")
    config = tmp_path / "servinglib.yaml"
    config.write_text((FIXTURE / "servinglib.yaml").read_text() + extra_models)
    return config


def infer(url: str, model: str, features: dict[str, Any], timeout: float = 30) -> requests.Response:
    return requests.post(
        f"{url}/infer", json={"model_id": model, "features": features}, timeout=timeout
    )


def timed(call: Callable[[], requests.Response]) -> tuple[int, float]:
    started = time.monotonic()
    status = call().status_code
    return status, time.monotonic() - started


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout_s} s")
        time.sleep(0.1)


@pytest.mark.parametrize("worker", ["asyncio", "gthread"])
def test_a_hung_model_cannot_wedge_its_worker(
    tmp_path: Path, start_server: Any, worker: str
) -> None:
    server: LiveServer = start_server(
        reliability_service(tmp_path), "--workers", "2", "--worker", worker
    )
    v2_hang = {"inputs": [{"name": "hang", "shape": [1], "datatype": "BOOL", "data": [True]}]}
    calls: list[Callable[[], requests.Response]] = [
        lambda: infer(server.url, "hanger", {"hang": True}) for _ in range(4)
    ]
    calls += [
        lambda: requests.post(f"{server.url}/v2/models/hanger/infer", json=v2_hang, timeout=30)
        for _ in range(2)
    ]
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        hung = [pool.submit(timed, call) for call in calls]
        # Meanwhile the other model, the health and metrics routes keep answering.
        steady = [infer(server.url, "steady", {}, timeout=5).status_code for _ in range(30)]
        assert requests.get(f"{server.url}/metrics", timeout=5).status_code == 200
        answers = [future.result() for future in hung]
    assert steady == [200] * 30
    statuses = Counter(status for status, _ in answers)
    assert set(statuses) <= {503, 504} and statuses[504] >= 1, statuses
    # deadline_ms is 500: every hung request is answered soon after it, never after 30 s
    assert max(seconds for _, seconds in answers) < 10, answers
    assert wait_for_metric(server.url, "servinglib_lost_calls_total", 1, model="hanger") >= 1
    server.wait_for_log("retires", timeout_s=30)
    assert "retires" in server.log()

    def recovered() -> bool:  # both workers serve the version again, nobody stepped in
        try:
            ok = [infer(server.url, "hanger", {}, timeout=5).status_code for _ in range(10)]
            return ok == [200] * 10 and requests.get(f"{server.url}/readyz").status_code == 200
        except requests.RequestException:
            return False

    wait_until(recovered, 90, "the wedged worker's replacement serving 'hanger'")
