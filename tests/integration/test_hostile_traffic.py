"""Hostile and unlucky traffic against a real gunicorn: malformed bodies, leaks, signals."""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import struct
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import LiveServer, launch, worker_pids

pytestmark = pytest.mark.integration


def malformed_bodies(
    rng: random.Random, count: int, protocol: str
) -> list[tuple[bytes, dict[str, str]]]:
    """``count`` broken requests: bad JSON, bad UTF-8, NaN, wrong types, huge or deep bodies."""
    json_type = {"Content-Type": "application/json"}
    good_infer = {"model_id": "scorer", "features": {"x": 1.0}}
    good_v2 = {"inputs": [{"name": "a", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}]}
    makers = [
        lambda: (b"{" + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))), json_type),
        lambda: (b'{"model_id": "\xff\xfe", "features": {}}', json_type),
        lambda: (b'{"model_id": "scorer", "features": {"x": NaN}}', json_type),
        lambda: (
            b'{"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [Infinity]}]}',
            json_type,
        ),
        lambda: (b"[" * 10_000 + b"]" * 10_000, json_type),
        lambda: (
            json.dumps(
                {"inputs": [{"name": "a", "shape": [10**7], "datatype": "FP32", "data": [0]}]}
            ).encode(),
            json_type,
        ),
        lambda: (b"0" * (9 * 1024 * 1024), json_type),
        lambda: (
            json.dumps({**good_infer, "features": {"x": rng.choice(["a", None, [], {}])}}).encode(),
            json_type,
        ),
        lambda: (
            json.dumps({"model_id": rng.choice([1, None, [], "Ghost"]), "features": {}}).encode(),
            json_type,
        ),
        lambda: (
            json.dumps(
                {
                    "inputs": [
                        {
                            "name": "a",
                            "shape": [3],
                            "datatype": rng.choice(["FP32", "INT8", "BOOL", "BYTES", "WAT"]),
                            "data": [rng.choice([1.5, "s", True, None, 300])] * 2,
                        }
                    ]
                }
            ).encode(),
            json_type,
        ),
        # Any Content-Type is JSON (Triton's rule), but a coding must match the bytes.
        lambda: (json.dumps(good_v2).encode(), {"Content-Encoding": "gzip"}),
        lambda: (gzip.compress(b"\0" * (64 * 1024 * 1024)), {"Content-Encoding": "gzip"}),
        lambda: (
            json.dumps(good_v2).encode(),
            {"Inference-Header-Content-Length": str(rng.randrange(-5, 10**6))},
        ),
        lambda: (
            json.dumps(
                {
                    "inputs": [
                        {
                            "name": "b",
                            "shape": [2],
                            "datatype": "BYTES",
                            "parameters": {"binary_data_size": 6},
                        }
                    ]
                }
            ).encode()
            + struct.pack("<I", 99)
            + b"xx",
            {"Inference-Header-Content-Length": "84"},
        ),
        # Bodies that once reached the model or crashed the decoder with a 500.
        lambda: (
            b'{"inputs":[{"name":"a","shape":[1],"datatype":"BYTES","data":["\\ud800"]}]}',
            json_type,
        ),
        lambda: (
            json.dumps(
                {"inputs": [{"name": "a", "shape": [0, 10**20], "datatype": "FP32", "data": []}]}
            ).encode(),
            json_type,
        ),
        lambda: (
            b'{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[' + b"9" * 400 + b"]}]}",
            json_type,
        ),
        lambda: (
            json.dumps(
                {
                    "inputs": [
                        {
                            "name": "a",
                            "shape": [1],
                            "datatype": rng.choice([{}, [], ["FP32"]]),
                            "data": [1],
                        }
                    ]
                }
            ).encode(),
            json_type,
        ),
        lambda: (b'{"model_id": "\xed\xa0\x80", "features": {}}', json_type),
        lambda: (b'{"model_id": "scorer", "features": {"x": ' + b"9" * 400 + b"}}", json_type),
        lambda: (
            b'{"inputs":[{"name":"a","shape":[1],"datatype":"FP32",'
            b'"parameters":{"binary_data_size":4}}]}' + struct.pack("<f", float("nan")),
            {"Inference-Header-Content-Length": "91"},
        ),
    ]
    bodies = [makers[i % len(makers)]() for i in range(count)]
    rng.shuffle(bodies)
    return bodies


@pytest.mark.parametrize("protocol", ["infer", "v2"])
def test_a_thousand_malformed_bodies_get_4xx_json_and_kill_no_worker(
    fixture_server: LiveServer, protocol: str
) -> None:
    url = fixture_server.url + ("/infer" if protocol == "infer" else "/v2/models/echo/infer")
    pids_before = worker_pids(fixture_server)
    bodies = malformed_bodies(random.Random(7), 1000, protocol)

    def send(item: tuple[bytes, dict[str, str]]) -> tuple[int, str, bool]:
        body, headers = item
        response = requests.post(url, data=body, headers=headers, timeout=30)
        try:
            # One compact shape on every path: {"error":"..."}, as the docs show.
            is_json_error = "error" in response.json() and response.content.startswith(
                b'{"error":"'
            )
        except ValueError:
            is_json_error = False
        return response.status_code, response.headers.get("Content-Type", ""), is_json_error

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(send, bodies))
    statuses = Counter(status for status, _, _ in results)
    assert all(400 <= status < 500 for status in statuses), statuses
    assert all(
        content_type.startswith("application/json") and ok for _, content_type, ok in results
    )
    assert worker_pids(fixture_server) == pids_before
    assert requests.get(f"{fixture_server.url}/v2/health/ready", timeout=5).status_code == 200


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_memory_does_not_grow_across_10000_failing_requests(
    start_server: Any, service_config: Path
) -> None:
    server: LiveServer = start_server(service_config, "--workers", "1", "--threads", "4")
    (pid,) = worker_pids(server)
    failing = {"model_id": "scorer", "features": {"x": 1, "explode": True}}

    def hammer(count: int) -> Counter[int]:
        statuses: Counter[int] = Counter()
        with requests.Session() as session:
            for _ in range(count):
                statuses[
                    session.post(f"{server.url}/infer", json=failing, timeout=30).status_code
                ] += 1
        return statuses

    hammer(1000)  # warm up allocators and caches
    before = rss_kib(pid)
    with ThreadPoolExecutor(max_workers=4) as pool:
        totals = sum(pool.map(hammer, [2500] * 4), Counter())
    after = rss_kib(pid)
    assert totals == {500: 10_000}
    assert after - before < 8 * 1024, f"RSS grew {after - before} KiB over 10,000 failing requests"


def test_sigterm_under_load_fails_no_accepted_request(tmp_path: Path, service_config: Path) -> None:
    server = launch(service_config, tmp_path, "--workers", "2", "--threads", "4")
    outcomes: Counter[str] = Counter()

    def one(i: int) -> None:
        try:
            response = requests.post(
                f"{server.url}/infer",
                json={"model_id": "scorer", "features": {"x": i}},
                headers={"Connection": "close"},
                timeout=30,
            )
        except requests.ConnectionError:
            outcomes["refused"] += 1  # never accepted: the listener was already closed
            return
        outcomes[str(response.status_code)] += 1

    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(one, i) for i in range(2000)]
        while sum(outcomes.values()) < 300:
            time.sleep(0.005)
        stopped_at = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        for future in futures:
            future.result()
    server.process.wait(timeout=60)
    assert time.monotonic() - stopped_at < 30  # graceful_timeout_s bounds the drain
    assert server.process.returncode == 0
    assert set(outcomes) <= {"200", "refused"}, outcomes
    assert outcomes["200"] >= 300


def test_kill_9_fails_only_that_workers_requests_and_the_replacement_waits_for_ready(
    tmp_path: Path, service_config: Path
) -> None:
    server = launch(service_config, tmp_path, "--workers", "2", "--threads", "4")
    try:
        victim = min(worker_pids(server))
        survivors = worker_pids(server) - {victim}
        outcomes: Counter[str] = Counter()

        def one(i: int) -> None:
            try:
                response = requests.post(
                    f"{server.url}/infer",
                    timeout=30,
                    json={"model_id": "scorer", "features": {"x": i}},
                )
                outcomes[str(response.status_code)] += 1
            except requests.RequestException:  # reset, or cut mid-response by the kill
                outcomes["connection lost"] += 1

        with ThreadPoolExecutor(max_workers=8) as pool:
            futures = [pool.submit(one, i) for i in range(1500)]
            while sum(outcomes.values()) < 300:
                time.sleep(0.005)
            os.kill(victim, signal.SIGKILL)
            for future in futures:
                future.result()
        assert set(outcomes) <= {"200", "connection lost"}, outcomes
        assert outcomes["connection lost"] <= 8  # at most the requests in flight on that worker
        deadline = time.monotonic() + 30
        while len(worker_pids(server) - {victim}) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = worker_pids(server)
        assert victim not in pids
        assert len(pids) == 2
        (replacement,) = pids - survivors
        booted = f"Booting worker with pid: {replacement}"
        replacement_boot = server.wait_for_log(booted, timeout_s=60).find(booted)
        assert replacement_boot != -1
        log = server.wait_for_log("READY", replacement_boot, timeout_s=60)
        # The replacement loads every model before gunicorn hands it a connection.
        assert log.find("READY", replacement_boot) != -1
    finally:
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=60)
