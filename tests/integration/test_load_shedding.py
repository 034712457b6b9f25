"""Overload, stalled bodies and compressed bombs under real gunicorn, both worker classes.

Figures are ratios measured against the same server in the same run (its capacity, its
unloaded latency), so a busy machine slows both sides alike; every wait polls a condition.
The 60-second figures are in ``benchmarks/reliability.py``.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import resource
import socket
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from benchmarks._open_loop import closed_loop, open_loop
from tests.conftest import LiveServer, launch, stop
from tests.integration.test_reliability import reliability_service

pytestmark = pytest.mark.integration

SLOW = """  - name: slow
    class: models/misbehaving/model.py:Misbehaving
    repository: models/misbehaving
    default_version: "1"
    instances: 1
    deadline_ms: 1000
"""
SLOW_BODY = {"model_id": "slow", "features": {"sleep_s": 0.05}}  # one copy: 20 calls/s


@pytest.mark.parametrize("keepalive", [True, False], ids=["keepalive", "connection-per-request"])
@pytest.mark.parametrize("worker", ["asyncio", "gthread"])
def test_4x_unbatched_overload_serves_capacity_and_sheds_the_rest_with_503(
    tmp_path: Path, start_server: Any, worker: str, keepalive: bool
) -> None:
    """4x capacity, open loop: most of capacity answered 200, the rest 503 at once."""
    server: LiveServer = start_server(
        reliability_service(tmp_path, SLOW), "--workers", "2", "--worker", worker
    )
    before = closed_loop(server.url, "/infer", SLOW_BODY, concurrency=16, seconds=3)
    seconds = 8.0
    answers = open_loop(server.url, "/infer", SLOW_BODY, 4 * before, seconds, keepalive=keepalive)
    # capacity measured on both sides of the overload: the lower one is what the machine
    # gave the server while other work shared its 2 cores
    capacity = min(before, closed_loop(server.url, "/infer", SLOW_BODY, concurrency=16, seconds=3))
    statuses = Counter(a.status for a in answers)
    start = min(a.sent for a in answers)
    # 200s answered from the first second to the end of the offered load: the model's
    # work while it was overloaded (not the queue draining afterwards)
    window = (start + 1.0, start + seconds)
    ok = [a for a in answers if a.status == 200 and window[0] <= a.done <= window[1]]
    goodput = len(ok) / (window[1] - window[0])
    slowest = max(a.seconds for a in answers)
    print(
        f"figures: {worker} {'keep-alive' if keepalive else 'new connections'}: capacity "
        f"{capacity:.1f}/s, goodput {goodput:.1f}/s ({goodput / capacity:.0%}), {dict(statuses)}, "
        f"slowest answer {slowest:.2f} s"
    )
    assert set(statuses) <= {200, 503, 504}, statuses  # never a client timeout or reset
    assert statuses[504] <= 0.02 * len(answers), statuses
    assert all(a.retry_after == "1" for a in answers if a.status == 503)
    # The 90 % target is benchmarks/reliability.py's (100 % there, 60 s on a quiet machine).
    # Here the open-loop client shares 2 cores with the server, which also refuses 3 requests
    # in 4, and whatever else runs: a machine at load 5 read 83 %, a CI run 74 %. Without
    # admission control every request waits out the queue and goodput collapses toward 0.
    assert goodput >= 0.6 * capacity, f"goodput {goodput:.1f}/s of {capacity:.1f}/s"
    assert slowest < 10, f"an answer took {slowest:.1f} s: requests piled up"


def test_gthread_sheds_at_once_what_would_wait_past_the_deadline_for_a_thread(
    tmp_path: Path, start_server: Any
) -> None:
    """8 threads in front of a model queue that holds 2 s of work: the requests the threads
    cannot take in time are refused at once, not after waiting for a thread."""
    config = reliability_service(tmp_path, SLOW.replace("deadline_ms: 1000", "deadline_ms: 2000"))
    server: LiveServer = start_server(config, "--workers", "1", "--worker", "gthread")
    answers = open_loop(server.url, "/infer", SLOW_BODY, 80, 6, keepalive=True)
    statuses = Counter(a.status for a in answers)
    quick = [a for a in answers if a.status == 503 and a.seconds < 0.1]
    late = [a for a in answers if a.status == 200 and a.seconds > 2.5]
    print(f"figures: {dict(statuses)}, {len(quick)} refused within 100 ms, {len(late)} late")
    assert set(statuses) <= {200, 503, 504}, statuses
    assert len(quick) >= 0.5 * statuses[503], "503s should mostly come at once, not after a wait"
    assert len(late) <= 0.02 * len(answers), f"{len(late)} answers past the deadline"


def _stall(port: int, declared: int = 1000) -> socket.socket:
    """A connection that sends a request head and one byte of its body."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        b"POST /infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {declared}\r\n\r\n{{".encode()
    )
    return sock


def _answer_of(sock: socket.socket, timeout_s: float) -> bytes:
    """What the server sends before it closes the connection (b"" when it resets it)."""
    sock.settimeout(timeout_s)
    data = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def _body_limit_service(tmp_path: Path) -> Path:
    config = reliability_service(tmp_path)
    config.write_text(
        config.read_text().replace(
            "server:\n", "server:\n  body_timeout_s: 2\n  body_min_bytes_per_s: 100\n"
        )
    )
    return config


@pytest.mark.parametrize("worker", ["asyncio", "gthread"])
def test_40_stalled_bodies_get_408_at_the_body_timeout_and_others_are_served(
    tmp_path: Path, start_server: Any, worker: str
) -> None:
    server: LiveServer = start_server(
        _body_limit_service(tmp_path), "--workers", "2", "--worker", worker
    )
    port = int(server.url.rsplit(":", 1)[1])
    stalled = [_stall(port) for _ in range(40)]
    opened = time.monotonic()
    stop_trickle = threading.Event()

    def trickle() -> None:  # one byte per second each, as the attack does
        while not stop_trickle.wait(1.0):
            for sock in stalled:
                with contextlib.suppress(OSError):
                    sock.send(b" ")

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    try:
        served = []
        for _ in range(7):
            started = time.monotonic()
            response = requests.post(
                f"{server.url}/infer", json={"model_id": "steady", "features": {}}, timeout=30
            )
            served.append((response.status_code, time.monotonic() - started))
        with ThreadPoolExecutor(max_workers=40) as pool:
            answers = list(pool.map(lambda s: _answer_of(s, 30), stalled))
        closed_after = time.monotonic() - opened
    finally:
        stop_trickle.set()
        for sock in stalled:
            sock.close()
    print(f"figures: {worker}: served {served}; stalled closed within {closed_after:.1f} s")
    assert [status for status, _ in served] == [200] * 7
    assert max(seconds for _, seconds in served) < 1.5  # not after the stalled bodies' 2 s
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), {a[:40] for a in answers}
    assert b"server.body_timeout_s" in answers[0]
    assert closed_after < 20


def test_2200_stalled_bodies_at_ulimit_1024_leave_room_for_other_clients(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"this test opens 2,200 sockets; the file limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    config = _body_limit_service(tmp_path)
    command = [
        "bash",
        "-c",
        f"ulimit -n 1024 && exec {sys.executable} -m servinglib.cli.main serve --config {config} "
        "--host 127.0.0.1 --workers 2 --worker asyncio",
    ]
    server = launch(config, tmp_path, command=command)
    port = int(server.url.rsplit(":", 1)[1])
    stalled: list[socket.socket] = []
    try:
        for _ in range(2200):
            with contextlib.suppress(OSError):  # a connection the server closed at once: fine
                stalled.append(_stall(port))
        statuses: Counter[int] = Counter()
        with requests.Session() as session:
            for _ in range(215):
                try:
                    response = session.post(
                        f"{server.url}/infer",
                        json={"model_id": "steady", "features": {}},
                        headers={"Connection": "close"},
                        timeout=10,
                    )
                    statuses[response.status_code] += 1
                except requests.RequestException:
                    statuses[0] += 1
        with ThreadPoolExecutor(max_workers=64) as pool:
            answers = list(pool.map(lambda s: _answer_of(s, 30), stalled))
    finally:
        for sock in stalled:
            sock.close()
        stop(server.process)
    kinds = Counter(a[:12] for a in answers)
    print(f"figures: legitimate requests {dict(statuses)}; stalled answered {dict(kinds)}")
    assert statuses[200] >= 213, statuses  # >= 99 %
    assert kinds[b"HTTP/1.1 408"] >= 0.9 * len(answers), kinds  # closed with a 408


def _bomb() -> bytes:
    """A gzip body of about 7.6 KiB that inflates to 7.5 MiB (1,000x), a valid request."""
    padding = " " * (7_500 * 1024)
    body = json.dumps({"model_id": "steady", "features": {"pad": 1}})
    return gzip.compress((body[:-2] + padding + body[-2:]).encode(), compresslevel=9)


def test_gzip_bombs_are_inflated_off_the_event_loop(tmp_path: Path, start_server: Any) -> None:
    """8 clients sending 1,000x gzip bodies: small requests keep p99 under 100 ms."""
    server: LiveServer = start_server(
        reliability_service(tmp_path), "--workers", "1", "--worker", "asyncio"
    )
    bomb = _bomb()
    assert len(bomb) < 10_000
    small = {"model_id": "steady", "features": {"sleep_s": 0}}
    sending = threading.Event()
    bombs: Counter[int] = Counter()

    def bomber() -> None:
        with requests.Session() as session:
            while not sending.is_set():
                response = session.post(
                    f"{server.url}/infer",
                    data=bomb,
                    headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
                    timeout=60,
                )
                bombs[response.status_code] += 1
                time.sleep(0.1)  # ~8 bodies/s per client at most: 60 KB/s compressed

    def latencies(count: int) -> list[float]:
        seen = []
        with requests.Session() as session:
            for _ in range(count):
                started = time.monotonic()
                response = session.post(f"{server.url}/infer", json=small, timeout=30)
                seen.append(time.monotonic() - started)
                assert response.status_code == 200, response.text
                time.sleep(0.01)
        return sorted(seen)

    unloaded = latencies(200)
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(bomber) for _ in range(8)]
        deadline = time.monotonic() + 60
        while sum(bombs.values()) < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        loaded = latencies(300)
        sending.set()
        for future in futures:
            future.result()
    p50, p99 = loaded[len(loaded) // 2], loaded[int(0.99 * (len(loaded) - 1))]
    base50, base99 = unloaded[len(unloaded) // 2], unloaded[int(0.99 * (len(unloaded) - 1))]
    print(
        f"figures: {dict(bombs)} bombs; small requests p50 {p50 * 1000:.1f} ms, p99 "
        f"{p99 * 1000:.1f} ms (without bombs: p50 {base50 * 1000:.1f}, p99 {base99 * 1000:.1f})"
    )
    assert bombs == {200: sum(bombs.values())}, bombs
    # Inflated and parsed on the loop, each bomb stopped it for ~50 ms of CPU and small
    # requests queued behind them (p50 2.4 s). Off the loop, what is left is the parse
    # thread holding the interpreter lock while it parses (about 20 ms of CPU per bomb):
    # on a quiet machine the p99 stays under 100 ms (benchmarks/reliability.py); here,
    # with the cores shared, bounds that hold whatever else runs.
    assert p50 < 0.15, f"small requests' p50 {p50 * 1000:.0f} ms with bombs arriving"
    assert p99 < 1.0, f"small requests' p99 {p99 * 1000:.0f} ms with bombs arriving"


ENSEMBLE = """  - name: stuck
    class: models/misbehaving/model.py:Misbehaving
    repository: models/stuck
    default_version: "1"
    require_self_tests: false
    deadline_ms: 1000
  - name: vote
    repository: models/vote
    default_version: "1"
    require_self_tests: false
    ensemble:
      "1":
        members:
          - {model: steady, name: a}
          - {model: stuck, name: b}
          - {model: steady, name: c}
        combiner: vote
        on_member_failure: answer_from_rest
        min_members: 1
"""


@pytest.mark.parametrize("worker", ["asyncio", "gthread"])
def test_an_ensemble_answers_from_the_rest_when_a_member_hangs(
    tmp_path: Path, start_server: Any, worker: str
) -> None:
    """The hung member fails at its own 1 s deadline; the ensemble answers 200 well before its
    10 s one. (Under gthread the member used to run on the step's thread, where no deadline
    can stop it: 9 of 16 answers were 504 at 10 s.)"""
    config = reliability_service(tmp_path, ENSEMBLE)
    # the hung calls never return: the worker's graceful stop would wait for them
    config.write_text(config.read_text().replace("server:\n", "server:\n  graceful_timeout_s: 2\n"))
    (tmp_path / "models" / "stuck" / "1").mkdir(parents=True)
    (tmp_path / "models" / "stuck" / "1" / "behaviour.json").write_text('{"hang": true}')
    (tmp_path / "models" / "vote" / "1").mkdir(parents=True)
    server: LiveServer = start_server(config, "--workers", "1", "--worker", worker)

    def vote(_: int) -> tuple[int, float]:
        started = time.monotonic()
        response = requests.post(
            f"{server.url}/infer", json={"model_id": "vote", "features": {}}, timeout=30
        )
        return response.status_code, time.monotonic() - started

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(vote, range(16)))
    print(f"figures: {worker}: {sorted((s, round(t, 1)) for s, t in answers)}")
    assert [status for status, _ in answers] == [200] * 16
    assert max(seconds for _, seconds in answers) < 6  # 8 threads: two waves of 1 s, and slack
