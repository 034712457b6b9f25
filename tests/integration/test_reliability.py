"""No wedged workers: hung models, signals, slow clients, memory, under real gunicorn.

Each test runs ``servinglib serve --workers 2`` over the misbehaving fixture model
(tests/fixtures/reliability) and waits for conditions, never for a fixed time. Overload is in
test_load_shedding.py.
"""

from __future__ import annotations

import contextlib
import json
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
from tests.integration.test_shadow_traffic_server import wait_for_metric

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
    print(f"figures: hung answers {answers}")
    assert steady == [200] * 30
    statuses = Counter(status for status, _ in answers)
    assert set(statuses) <= {503, 504}, statuses
    assert statuses[504] >= 1, statuses
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


def test_a_quick_model_that_stops_on_the_event_loop_is_cut_off_and_moved_to_threads(
    tmp_path: Path, start_server: Any
) -> None:
    """A model quick enough to run on the loop, until one call waits: the loop goes on."""
    server: LiveServer = start_server(
        reliability_service(tmp_path), "--workers", "1", "--worker", "asyncio"
    )
    quick = {"sleep_s": 0, "thread": True}

    def on_the_loop() -> bool:  # once its calls are measured quick, it runs on the loop
        return bool(infer(server.url, "steady", quick).json()["output"]["thread"] == "MainThread")

    release = tmp_path / "release"
    started = tmp_path / "started"

    def waiting_threads() -> list[str]:
        return started.read_text().split() if started.exists() else []

    # The measure is a moving average of call durations: on a busy machine (another thread
    # holding the GIL) the call that said "quick" may itself be measured slow, and the next
    # call goes to a thread. So try until the waiting call is seen waiting on the loop.
    stuck_call = {**quick, "wait_for": str(release), "started_to": str(started)}
    for attempt in range(20):
        wait_until(on_the_loop, 120, "'steady' measured quick and answered on the event loop")
        started.unlink(missing_ok=True)
        release.unlink(missing_ok=True)
        pool = ThreadPoolExecutor(max_workers=1)
        stuck = pool.submit(infer, server.url, "steady", stuck_call)
        wait_until(lambda: bool(waiting_threads()), 30, "the waiting call to start")
        if waiting_threads()[0] == "MainThread":
            print(f"figures: the waiting call ran on the loop at attempt {attempt + 1}")
            break
        release.touch()  # it went to a thread: let it finish, and try again
        assert stuck.result(timeout=30).status_code == 200
        pool.shutdown()
    else:
        pytest.fail("20 waiting calls in a row went to threads, not the event loop")
    with pool:
        wait_until(lambda: "was interrupted" in server.log(), 30, "the cut-off of the call")
        # The loop answers while the call waits (on a thread now, rerun there).
        assert requests.get(f"{server.url}/readyz", timeout=10).status_code == 200
        assert infer(server.url, "hanger", {"sleep_s": 0}, timeout=10).status_code == 200
        assert not stuck.done()
        release.touch()
        answer = stuck.result(timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["output"]["thread"] != "MainThread"
    after = infer(server.url, "steady", quick).json()["output"]["thread"]
    assert after != "MainThread"  # its calls stay on the model's threads


def prediction_log_service(tmp_path: Path) -> tuple[Path, str]:
    url = f"sqlite:///{tmp_path / 'predictions.db'}"
    config = reliability_service(tmp_path)
    config.write_text(
        config.read_text().replace(
            "server:\n",
            "server:\n  graceful_timeout_s: 10\n",
        )
        + f"monitoring:\n  prediction_log: {{url: '{url}', sample_rate: 1.0, "
        "flush_interval_ms: 60000, batch_size: 10000}\n"
    )
    return config, url


def connection_failure(error: requests.ConnectionError) -> str:
    """refused (never accepted), closed (closed before the request was read: the server
    neither read nor answered it), or reset (an RST, or anything else)."""
    text = str(error)
    if "refused" in text.lower():
        return "refused"
    if "RemoteDisconnected" in text:
        return "closed"
    return "reset"


@pytest.mark.parametrize("signum", ["SIGINT", "SIGQUIT", "SIGTERM"])
def test_a_signal_to_the_master_drains_and_loses_no_row(tmp_path: Path, signum: str) -> None:
    import signal
    import sqlite3

    from tests.conftest import launch

    config, url = prediction_log_service(tmp_path)
    server = launch(config, tmp_path, "--workers", "2")
    answered: list[str] = []
    failures: Counter[str] = Counter()
    errors: list[str] = []

    def client(first: int) -> None:
        with requests.Session() as session:  # kept-alive connections, as a proxy keeps them
            for i in range(first, first + 200):
                try:
                    response = session.post(
                        f"{server.url}/infer",
                        json={"model_id": "steady", "features": {"sleep_s": 0.01}},
                        headers={"x-request-id": f"req-{i}"},
                        timeout=30,
                    )
                except requests.ConnectionError as e:
                    failures[connection_failure(e)] += 1
                    errors.append(f"req-{i}: {e}")
                    return  # the server is gone for this client
                if response.status_code != 200:
                    failures[str(response.status_code)] += 1
                else:
                    answered.append(response.headers["x-request-id"])

    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(client, 1000 * c) for c in range(8)]
        wait_until(lambda: len(answered) >= 100, 60, "100 answers")
        stopped_at = time.monotonic()
        server.process.send_signal(getattr(signal, signum))
        for future in futures:
            future.result()
    server.process.wait(timeout=60)
    took = time.monotonic() - stopped_at
    print(f"figures: {signum} exit {took:.1f} s, {len(answered)} answered, {failures}")
    assert took < 10, f"exit took {took:.1f} s (graceful_timeout_s is 10)"
    assert server.process.returncode == 0, server.log()
    assert "Perhaps out of memory" not in server.log()
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        logged = {row[0] for row in db.execute("SELECT request_id FROM predictions")}
    assert set(answered) <= logged, f"{len(set(answered) - logged)} answers have no row"
    assert set(failures) <= {"refused", "closed"}, (failures, errors)  # 0 resets


@pytest.mark.parametrize("worker", ["asyncio", "gthread"])
def test_slowloris_and_idle_connections_leave_room_for_real_requests(
    tmp_path: Path, worker: str
) -> None:
    import resource
    import socket
    import sys

    from tests.conftest import launch, stop

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"this test opens 3,500 sockets; the file limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    config = reliability_service(tmp_path)
    command = [
        "bash",
        "-c",
        f"ulimit -n 1024 && exec {sys.executable} -m servinglib serve --config {config} "
        f"--host 127.0.0.1 --workers 2 --worker {worker}",
    ]
    server = launch(config, tmp_path, command=command)
    port = int(server.url.rsplit(":", 1)[1])
    held: list[socket.socket] = []
    try:
        slow = []
        for i in range(3500):  # 500 slowloris clients, then 3,000 that send nothing
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            if i < 500:
                sock.sendall(b"POST /infer HTTP/1.1\r\nHost: x\r\n")
                slow.append(sock)
            held.append(sock)
        statuses: Counter[int] = Counter()
        with requests.Session() as session:
            for i in range(200):
                if i % 20 == 0:  # the slowloris clients trickle on, one header byte each
                    for sock in slow:
                        with contextlib.suppress(OSError):  # closed by the server: fine
                            sock.send(b"X")
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
        print(f"figures: {worker}: legitimate requests {statuses}")
        assert statuses[200] >= 198, statuses  # >= 99 %
    finally:
        for sock in held:
            sock.close()
        stop(server.process)


def worker_rss_bytes(url: str) -> dict[str, float]:
    """``servinglib_worker_resident_memory_bytes`` by worker pid."""
    from tests.integration.test_shadow_traffic_server import metric_values

    return {
        dict(key)["pid"]: value
        for key, value in metric_values(url, "servinglib_worker_resident_memory_bytes").items()
    }


def both_sampled(url: str) -> Callable[[], bool]:
    """Whether both workers have reported their resident memory (the gauge starts at 0)."""

    def sampled() -> bool:
        rss = worker_rss_bytes(url)
        return len(rss) == 2 and min(rss.values()) > 0

    return sampled


def test_8_mib_tensors_at_15_per_second_keep_worker_memory_bounded(tmp_path: Path) -> None:
    from tests.conftest import launch, stop
    from tests.integration.test_shadow_traffic_server import total

    config, _ = prediction_log_service(tmp_path)
    server = launch(config, tmp_path, "--workers", "2")
    try:
        wait_until(
            both_sampled(server.url),
            60,
            "both RSS gauges",
        )
        before = max(worker_rss_bytes(server.url).values())
        tensor = bytes(8 * 1024 * 1024 - 4096)  # FP32 zeros, just under the body limit
        header = json.dumps(
            {
                "inputs": [
                    {
                        "name": "x",
                        "shape": [len(tensor) // 4],
                        "datatype": "FP32",
                        "parameters": {"binary_data_size": len(tensor)},
                    }
                ]
            }
        ).encode()
        peak = before
        statuses: Counter[int] = Counter()
        with requests.Session() as session:
            start = time.monotonic()
            for i in range(150):  # 15 per second for 10 s
                delay = start + i / 15 - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                response = session.post(
                    f"{server.url}/v2/models/steady/infer",
                    data=header + tensor,
                    headers={"Inference-Header-Content-Length": str(len(header))},
                    timeout=30,
                )
                statuses[response.status_code] += 1
                if i % 10 == 0:
                    peak = max(peak, *worker_rss_bytes(server.url).values())
        assert statuses == {200: 150}, statuses
        truncated = total(
            server.url, "servinglib_prediction_log_records_total", outcome="truncated"
        )
        assert truncated == 150
        grown = (peak - before) / 2**20
        print(f"figures: RSS {before / 2**20:.0f} -> peak {peak / 2**20:.0f} MiB")
        assert grown < 256, f"a worker grew {grown:.0f} MiB (from {before / 2**20:.0f} MiB)"
        assert peak < 512 * 2**20, f"a worker reached {peak / 2**20:.0f} MiB"
    finally:
        stop(server.process)


def test_a_leaking_model_gets_its_worker_replaced_at_max_rss_mb(
    tmp_path: Path, start_server: Any
) -> None:
    config = reliability_service(tmp_path)
    server: LiveServer = start_server(config, "--workers", "2")
    wait_until(
        both_sampled(server.url),
        60,
        "both RSS gauges",
    )
    limit_mb = int(max(worker_rss_bytes(server.url).values()) / 2**20) + 150
    stop_first = server.process
    stop_first.terminate()
    stop_first.wait(timeout=60)
    config.write_text(
        config.read_text().replace("server:\n", f"server:\n  max_rss_mb: {limit_mb}\n")
    )
    server = start_server(config, "--workers", "2")
    for _ in range(60):  # 20 MB per call: some worker crosses the limit within 20 calls
        infer(server.url, "steady", {"leak_mb": 20}, timeout=30)
        if "retires" in server.log():
            break
    server.wait_for_log("resident memory", timeout_s=30)
    assert "is above server.max_rss_mb" in server.log()

    def replaced() -> bool:
        rss = worker_rss_bytes(server.url)
        return len(rss) == 2 and max(rss.values()) < limit_mb * 2**20

    wait_until(replaced, 90, "a fresh worker under the memory limit")
    assert infer(server.url, "steady", {}).status_code == 200
