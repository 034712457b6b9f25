"""A real ``servinglib serve``: gunicorn with 2 workers (asyncio, the default) on loopback, real HTTP."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import LiveServer

pytestmark = pytest.mark.integration


def post(url: str, body: Any, **kwargs: Any) -> requests.Response:
    # A fresh connection per request lets the kernel spread requests over both workers.
    return requests.post(url, json=body, headers={"Connection": "close"}, timeout=30, **kwargs)


def wait_for_workers(url: str, workers: int, timeout_s: float = 60) -> tuple[set[int], int]:
    """Ask whoami until ``workers`` distinct pids answered; returns the pids and requests sent."""
    pids: set[int] = set()
    sent = 0
    deadline = time.monotonic() + timeout_s
    while len(pids) < workers:
        assert time.monotonic() < deadline, f"only workers {pids} answered"
        with ThreadPoolExecutor(max_workers=4) as pool:
            responses = list(
                pool.map(
                    lambda _: post(f"{url}/infer", {"model_id": "whoami", "features": {}}), range(8)
                )
            )
        sent += len(responses)
        pids |= {r.json()["output"]["pid"] for r in responses}
    return pids, sent


def test_two_versions_answer_and_failed_versions_never_do(fixture_server: LiveServer) -> None:
    url = fixture_server.url
    for _ in range(20):
        default = post(f"{url}/infer", {"model_id": "scorer", "features": {"x": 2.0}}).json()
        assert (default["version"], default["output"]) == ("2", {"score": 6.0})
        v1 = post(
            f"{url}/infer", {"model_id": "scorer", "version": "1", "features": {"x": 2.0}}
        ).json()
        assert (v1["version"], v1["output"]) == ("1", {"score": 4.0})
        for broken in ("3", "4"):
            response = post(
                f"{url}/infer", {"model_id": "scorer", "version": broken, "features": {"x": 2.0}}
            )
            assert response.status_code == 503
            assert "FAILED" in response.json()["error"]
            v2 = post(
                f"{url}/v2/models/scorer/versions/{broken}/infer",
                {"inputs": [{"name": "x", "shape": [1], "datatype": "FP64", "data": [2.0]}]},
            )
            assert v2.status_code == 503
    models = requests.get(f"{url}/models", timeout=5).json()["models"]
    scorer = {v["version"]: v for v in models[0]["versions"]}
    assert scorer["3"]["state"] == "FAILED"
    assert scorer["3"]["reason"].startswith(
        "load() raised RuntimeError: weights are corrupt (on purpose) at "
    )
    # public answers name the user's file by its last part, never its absolute path
    assert scorer["3"]["reason"].endswith(
        ' .../model.py:18: raise RuntimeError("weights are corrupt (on purpose)")'
    )
    assert scorer["4"]["state"] == "FAILED"
    assert scorer["4"]["reason"].startswith(
        "self-test 'wrong expectation' failed: $.score: expected 11.0"
    )
    assert requests.get(f"{url}/v2/models/scorer/versions/3/ready", timeout=5).status_code == 400
    assert requests.get(f"{url}/v2/health/ready", timeout=5).status_code == 200


def test_request_id_and_json_access_log(fixture_server: LiveServer) -> None:
    response = post(
        f"{fixture_server.url}/infer",
        {"model_id": "scorer", "features": {"x": 1}},
    )
    generated = response.headers["x-request-id"]
    mine = post(f"{fixture_server.url}/infer", {"model_id": "scorer", "features": {"x": 1}}).headers
    assert generated != mine["x-request-id"]
    echoed = requests.post(
        f"{fixture_server.url}/infer",
        json={"model_id": "scorer", "features": {"x": 1}},
        headers={"x-request-id": "trace-42"},
        timeout=5,
    )
    assert echoed.headers["x-request-id"] == "trace-42"
    log = fixture_server.wait_for_log('"request_id": "trace-42"')
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    entry = next(e for e in lines if e.get("request_id") == "trace-42")
    assert entry["event"] == "request"
    assert entry["status"] == 200
    assert entry["model"] == "scorer"
    assert entry["version"] == "2"
    assert entry["duration_ms"] > 0


def _requests_total(url: str) -> dict[tuple[str, ...], float]:
    text = requests.get(f"{url}/metrics", timeout=5).text
    totals: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "servinglib_requests":
            for sample in family.samples:
                if sample.name == "servinglib_requests_total":
                    labels = sample.labels
                    key = (
                        labels["model"],
                        labels["version"],
                        labels["protocol"],
                        labels["outcome"],
                    )
                    totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def test_metrics_summed_over_workers_equal_requests_sent(
    start_server: Any, service_config: Path
) -> None:
    server: LiveServer = start_server(service_config, "--workers", "2", "--threads", "4")
    url = server.url
    _, warmup = wait_for_workers(url, 2)
    plan = (
        [("whoami", {"model_id": "whoami", "features": {}})] * 120
        + [("ok", {"model_id": "scorer", "features": {"x": 1}})] * 40
        + [("invalid", {"model_id": "scorer", "features": {"x": "a"}})] * 15
        + [("boom", {"model_id": "scorer", "features": {"x": 1, "explode": True}})] * 10
        + [("missing", {"model_id": "ghost", "features": {}})] * 5
        + [("failed", {"model_id": "scorer", "version": "3", "features": {"x": 1}})] * 10
    )
    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(lambda item: post(f"{url}/infer", item[1]), plan))
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {200: 160, 400: 15, 500: 10, 404: 5, 503: 10}
    totals = _requests_total(url)
    assert sum(totals.values()) == warmup + len(plan)
    assert totals[("whoami", "1", "infer", "success")] == warmup + 120
    assert totals[("scorer", "2", "infer", "success")] == 40
    assert totals[("scorer", "", "infer", "invalid_input")] == 15
    assert totals[("scorer", "2", "infer", "model_error")] == 10
    assert totals[("_unknown", "", "infer", "not_found")] == 5
    assert totals[("scorer", "3", "infer", "not_ready")] == 10


def test_a_killed_worker_is_replaced_and_its_counts_remain(
    start_server: Any, service_config: Path
) -> None:
    server: LiveServer = start_server(service_config, "--workers", "2")
    pids, warmup = wait_for_workers(server.url, 2)
    os.kill(min(pids), signal.SIGKILL)
    answered = 0
    for _ in range(40):
        response = post(f"{server.url}/infer", {"model_id": "whoami", "features": {}})
        assert response.status_code == 200
        answered += 1
    assert sum(_requests_total(server.url).values()) == warmup + answered


def test_shipped_gunicorn_conf_runs_the_same_app(start_server: Any, service_config: Path) -> None:
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    server: LiveServer = start_server(
        service_config,
        command=[
            gunicorn,
            "-c",
            "python:servinglib.serve.gunicorn_conf",
            "servinglib.serve.wsgi:app",
        ],
        env={"SERVINGLIB_CONFIG": str(service_config), "SERVINGLIB_HOST": "127.0.0.1"},
    )
    body = post(f"{server.url}/infer", {"model_id": "scorer", "features": {"x": 3}}).json()
    assert body["output"] == {"score": 9.0}
    assert "servinglib_requests_total" in requests.get(f"{server.url}/metrics", timeout=5).text
