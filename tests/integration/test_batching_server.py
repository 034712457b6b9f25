"""Dynamic batching under a real gunicorn: batches form, poison stays alone, queues shed."""

from __future__ import annotations

import shutil
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import LiveServer
from tests.integration.test_shadow_traffic_server import total

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent.parent / "fixtures" / "batching"


def service(tmp_path: Path, batching: str) -> Path:
    shutil.copytree(FIXTURE / "models", tmp_path / "models")
    config = tmp_path / "servinglib.yaml"
    config.write_text(
        (FIXTURE / "servinglib.yaml")
        .read_text()
        .replace(
            "batching: {max_batch_size: 16, max_queue_delay_us: 2000, max_queue_size: 64}", batching
        )
    )
    return config


def post(url: str, features: dict[str, Any]) -> requests.Response:
    return requests.post(
        f"{url}/infer", json={"model_id": "summer", "features": features}, timeout=30
    )


def test_concurrent_requests_share_batches_and_poison_fails_alone(
    tmp_path: Path, start_server: Any
) -> None:
    server: LiveServer = start_server(
        service(
            tmp_path,
            "batching: {max_batch_size: 16, max_queue_delay_us: 2000, max_queue_size: 256}",
        ),
        "--workers",
        "1",
        "--threads",
        "32",
    )
    payloads = [{"values": [i, 1]} for i in range(300)]
    payloads[150] = {"values": [1], "poison": True}
    with ThreadPoolExecutor(max_workers=32) as pool:
        responses = list(pool.map(lambda p: post(server.url, p), payloads))
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {200: 299, 500: 1}
    assert responses[150].status_code == 500
    assert "error id" in responses[150].json()["error"]
    for i, response in enumerate(responses):
        if i != 150:
            assert response.json()["output"]["sum"] == float(i + 1)
    assert max(r.json()["output"]["batch"] for r in responses if r.status_code == 200) > 1
    assert total(server.url, "servinglib_batch_size_sum") == 299
    assert total(server.url, "servinglib_batch_size_count") < 299
    assert total(server.url, "servinglib_queue_time_seconds_count") >= 300
    invalid = post(server.url, {"values": "nope"})
    assert invalid.status_code == 400
    assert "`values` must be a list" in invalid.json()["error"]


def test_a_full_queue_sheds_with_503_and_retry_after(tmp_path: Path, start_server: Any) -> None:
    server: LiveServer = start_server(
        service(
            tmp_path, "batching: {max_batch_size: 1, max_queue_delay_us: 0, max_queue_size: 2}"
        ),
        "--workers",
        "1",
        "--threads",
        "32",
    )
    with ThreadPoolExecutor(max_workers=32) as pool:
        responses = list(pool.map(lambda i: post(server.url, {"values": [i]}), range(200)))
    statuses = Counter(r.status_code for r in responses)
    assert set(statuses) == {200, 503}, statuses
    shed = [r for r in responses if r.status_code == 503]
    assert all(r.headers["Retry-After"] == "1" and "queued" in r.json()["error"] for r in shed)
    for i, response in enumerate(responses):
        if response.status_code == 200:
            assert response.json()["output"]["sum"] == float(i)
    assert total(server.url, "servinglib_requests_total", outcome="shed") == statuses[503]
