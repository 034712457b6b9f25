"""The asyncio worker: the event loop never waits for a model, limits hold on both paths."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import requests

from tests.conftest import LiveServer, launch, stop

pytestmark = pytest.mark.integration

SLOW_MODEL = '''
import time
import servinglib


class Slow(servinglib.Model):
    """Sleeps ``x`` seconds (a model holding its thread), then echoes ``x``."""

    def load(self, path):
        pass

    def predict(self, features):
        time.sleep(features["x"])
        return {"slept": features["x"]}
'''


def write_slow_service(directory: Path) -> Path:
    (directory / "models" / "slow" / "1").mkdir(parents=True)
    (directory / "models" / "slow" / "model.py").write_text(SLOW_MODEL)
    config = directory / "servinglib.yaml"
    config.write_text(
        "service: slow\n"
        "server: {max_request_body_bytes: 4096}\n"
        "models:\n"
        "  - name: slow\n"
        "    class: models/slow/model.py:Slow\n"
        "    repository: models/slow\n"
        "    default_version: '1'\n"
        "    require_self_tests: false\n"
    )
    return config


@pytest.fixture
def slow_service(tmp_path: Path) -> Path:
    return write_slow_service(tmp_path)


@pytest.fixture(scope="module")
def asyncio_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The slow service on one asyncio worker with 4 threads, shared by the tests that only
    send it requests (each leaves it idle within seconds: a deadline's call ends after 3 s)."""
    directory = tmp_path_factory.mktemp("slow")
    server = launch(
        write_slow_service(directory), directory, "--workers", "1", "--threads", "4",
        "--worker", "asyncio",
    )  # fmt: skip
    yield server
    stop(server.process)


def infer(url: str, seconds: float, **headers: str) -> requests.Response:
    return requests.post(
        f"{url}/infer", json={"model_id": "slow", "features": {"x": seconds}}, headers=headers
    )


def test_slow_unbatched_calls_run_in_parallel_and_never_block_the_loop(
    asyncio_server: LiveServer,
) -> None:
    server = asyncio_server
    with ThreadPoolExecutor(8) as pool:
        started = time.perf_counter()
        # Margins wide enough for a loaded 2-core machine: a blocked loop or serial calls
        # would take 2 s and 8 s.
        slow = [pool.submit(infer, server.url, 2.0) for _ in range(4)]
        time.sleep(0.1)
        probe_started = time.perf_counter()
        probe = requests.get(f"{server.url}/livez", timeout=5)
        probe_s = time.perf_counter() - probe_started
        answers = [future.result() for future in slow]
        total_s = time.perf_counter() - started
    assert probe.status_code == 200
    assert probe_s < 1.0, f"/livez waited {probe_s:.3f} s behind the model calls"
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    assert total_s < 6.0, f"4 calls of 2 s on 4 threads took {total_s:.2f} s"


def test_deadline_answers_504_while_the_model_still_runs(asyncio_server: LiveServer) -> None:
    server = asyncio_server
    started = time.perf_counter()
    answer = infer(server.url, 3.0, **{"x-envoy-expected-rq-timeout-ms": "200"})
    elapsed = time.perf_counter() - started
    assert answer.status_code == 504, answer.text
    assert "deadline" in answer.json()["error"]
    assert elapsed < 2.5  # the model still runs for 3 s
    assert infer(server.url, 0.0).status_code == 200


def _chunked_post(url: str, path: str, size: int) -> tuple[int, dict[str, Any]]:
    parsed = urlparse(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=10)
    body = b'{"model_id": "slow", "features": {"pad": "' + b"a" * size + b'"}}'
    connection.request(
        "POST",
        path,
        iter([body[i : i + 1000] for i in range(0, len(body), 1000)]),
        {"Content-Type": "application/json"},
        encode_chunked=True,
    )
    response = connection.getresponse()
    answer: dict[str, Any] = json.loads(response.read())
    connection.close()
    return response.status, answer


@pytest.mark.parametrize("path", ["/infer", "/v2/models/slow/infer"])
def test_chunked_body_over_the_limit_is_refused_with_413(
    asyncio_server: LiveServer, path: str
) -> None:
    server = asyncio_server
    status, answer = _chunked_post(server.url, path, 10_000)
    assert status == 413
    assert "4096 bytes" in answer["error"]
    assert infer(server.url, 0.0).status_code == 200  # the worker is fine


def _raw(url: str, head: bytes) -> bytes:
    parsed = urlparse(url)
    with socket.create_connection((parsed.hostname, parsed.port), timeout=10) as sock:
        with contextlib.suppress(OSError):  # the server may close while a head still arrives
            sock.sendall(head)
        received = b""
        with contextlib.suppress(ConnectionResetError):  # closed with the head half unread
            while chunk := sock.recv(65536):
                received += chunk
    return received


@pytest.mark.parametrize("worker", ["asyncio", "gthread"])
def test_header_limits_hold_under_the_asyncio_worker(
    start_server: Any, slow_service: Path, asyncio_server: LiveServer, worker: str
) -> None:
    """httptools has no limits of its own: server.max_header_bytes and max_headers apply.

    (The name is historical: gthread, which reads heads on its main thread, is held to the
    same limits.)
    """
    if worker == "asyncio":
        server = asyncio_server
    else:
        server = start_server(slow_service, "--workers", "1", "--worker", worker)
    too_many = b"".join(b"x-h%d: 1\r\n" % i for i in range(101))
    heads = {
        "fields": b"GET /livez HTTP/1.1\r\nHost: x\r\n" + too_many + b"\r\n",
        "field": b"GET /livez HTTP/1.1\r\nHost: x\r\nx-big: " + b"a" * 9000 + b"\r\n\r\n",
        "line": b"GET /livez?" + b"q" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        "endless": b"GET /livez HTTP/1.1\r\nHost: x\r\nx-endless: " + b"a" * 2_000_000,
    }
    for name, head in heads.items():
        answer = _raw(server.url, head)
        if name == "endless" and not answer:
            continue  # closed while 2 MB were still arriving: the client may only see a reset
        refused = (b"HTTP/1.1 431 ", b"HTTP/1.1 414 ") if name == "line" else b"HTTP/1.1 431 "
        assert answer.startswith(refused), (name, answer[:200])  # gthread: 414 for a long line
        assert b'{"error":' in answer, name
    within = b"".join(b"x-h%d: 1\r\n" % i for i in range(90))
    answer = _raw(
        server.url, b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + within + b"\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


def test_keepalive_connections_spread_over_the_workers(
    start_server: Any, service_config: Path
) -> None:
    """All 8 connections open on one worker (the other is stopped); they end up shared."""
    server = start_server(service_config, "--workers", "2", "--worker", "asyncio")
    # /readyz answers once one worker is up; gunicorn forks the second one a moment later.
    deadline = time.monotonic() + 60
    while True:
        children = subprocess.run(
            ["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True, check=False
        ).stdout.split()
        if len(children) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    workers = [int(pid) for pid in children]
    assert len(workers) == 2, children
    body = {"model_id": "whoami", "features": {}}
    sessions = [requests.Session() for _ in range(8)]
    os.kill(workers[1], signal.SIGSTOP)
    try:
        first = {s.post(f"{server.url}/infer", json=body).json()["output"]["pid"] for s in sessions}
    finally:
        os.kill(workers[1], signal.SIGCONT)
    assert first == {workers[0]}
    last: dict[int, int] = {}
    for _ in range(30):
        for session in sessions:
            answer = session.post(f"{server.url}/infer", json=body)
            assert answer.status_code == 200
    for i, session in enumerate(sessions):
        last[i] = session.post(f"{server.url}/infer", json=body).json()["output"]["pid"]
    per_worker = [list(last.values()).count(pid) for pid in workers]
    assert min(per_worker) >= 3, per_worker
    for session in sessions:
        session.close()
