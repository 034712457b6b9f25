"""The admin API under load: loopback-only, token-protected, and no request ever fails."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import requests

from servinglib.errors import ServinglibError
from servinglib.serve.admin_client import AdminClient
from tests.conftest import LiveServer, free_port, wait_all_workers, worker_pids
from tests.integration._delivery import LoadThreads

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent.parent / "fixtures" / "service"
TOKEN = "s3cret-token-for-tests-only-0123456789"


def admin_service(tmp_path: Path, port: int) -> Path:
    shutil.copytree(FIXTURE / "models", tmp_path / "models")
    config = tmp_path / "servinglib.yaml"
    text = (FIXTURE / "servinglib.yaml").read_text()
    text = text.replace('default_version: "2"', 'default_version: "2"\n    versions: ["2"]', 1)
    config.write_text(text + f"admin: {{enabled: true, port: {port}}}\n")
    return config


class Load(LoadThreads):
    """Unversioned requests in a loop from 4 threads; remembers every status and version."""

    def __init__(self, url: str) -> None:
        super().__init__(4)
        self.url = url
        self.statuses: Counter[int] = Counter()
        self.versions: Counter[str] = Counter()
        self.errors: list[str] = []

    def _run(self) -> None:
        with requests.Session() as session:
            while not self._stop.is_set():
                try:
                    response = session.post(
                        f"{self.url}/infer",
                        timeout=30,
                        json={"model_id": "scorer", "features": {"x": 1.0}},
                    )
                except requests.RequestException as e:
                    self.errors.append(repr(e))
                    continue
                self.statuses[response.status_code] += 1
                if response.status_code == 200:
                    self.versions[response.json()["version"]] += 1


def test_admin_is_off_the_public_port_and_needs_the_token(
    tmp_path: Path, start_server: Any
) -> None:
    port = free_port()
    server: LiveServer = start_server(
        admin_service(tmp_path, port), "--workers", "2", env={"SERVINGLIB_ADMIN_TOKEN": TOKEN}
    )
    assert requests.get(f"{server.url}/admin/status", timeout=5).status_code == 404
    assert requests.post(f"{server.url}/admin/models/scorer/promote", timeout=5).status_code == 404
    assert requests.get(f"http://127.0.0.1:{port}/admin/status", timeout=5).status_code == 401
    wrong = requests.get(
        f"http://127.0.0.1:{port}/admin/status",
        timeout=5,
        headers={"Authorization": "Bearer " + TOKEN[:-1] + "X"},
    )
    assert wrong.status_code == 401
    assert wrong.headers["WWW-Authenticate"].startswith("Bearer")
    client = AdminClient(port, TOKEN)
    for hostile in ("..", "../../etc", "%2e%2e", "1/../../x", "UPPER"):
        status, _ = client.call("POST", f"/admin/models/scorer/versions/{hostile}/load")
        assert status in (400, 404), hostile
    assert client.call("POST", "/admin/models/ghost/versions/1/load")[0] == 404
    _status_into_a_closed_pipe(port)


def _status_into_a_closed_pipe(port: int) -> None:
    """`servinglib admin status | head`: the reader is gone before the status is printed."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "servinglib.cli.main", "admin", "status", "--port", str(port)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "SERVINGLIB_ADMIN_TOKEN": TOKEN},
        )
    finally:
        os.close(write_end)
    assert result.returncode == 141, result.stderr
    assert result.stderr == ""  # no BrokenPipeError traceback, no "Exception ignored"


@pytest.mark.parametrize(
    ("token", "said"),
    [("", "SERVINGLIB_ADMIN_TOKEN is empty"), ("x", "SERVINGLIB_ADMIN_TOKEN has 1 characters")],
)
def test_admin_refuses_to_start_without_a_long_token(tmp_path: Path, token: str, said: str) -> None:
    config = admin_service(tmp_path, free_port())
    result = subprocess.run(
        [sys.executable, "-m", "servinglib.cli.main", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "SERVINGLIB_ADMIN_TOKEN": token},
    )
    assert result.returncode == 2
    assert said in result.stderr
    assert "at least 32 characters" in result.stderr


def test_a_taken_admin_port_is_one_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:  # e.g. Envoy's admin listener in the same pod
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = admin_service(tmp_path, taken.getsockname()[1])
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "servinglib.cli.main",
                "serve",
                "--config",
                str(config),
                "--port",
                str(free_port()),
                "--workers",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "SERVINGLIB_ADMIN_TOKEN": TOKEN},
        )
    assert result.returncode != 0
    assert "set admin.port in servinglib.yaml to a free port" in result.stderr
    assert "Traceback" not in result.stderr


def test_failing_load_promote_and_rollback_under_load_fail_no_request(
    tmp_path: Path, start_server: Any
) -> None:
    port = free_port()
    server: LiveServer = start_server(
        admin_service(tmp_path, port),
        "--workers",
        "2",
        "--threads",
        "4",
        env={"SERVINGLIB_ADMIN_TOKEN": TOKEN},
    )
    client = AdminClient(port, TOKEN)
    with Load(server.url) as load:
        client.load("scorer", "4")  # its self-test fails
        assert set(client.wait_for("scorer", "4").values()) == {"FAILED"}
        with pytest.raises(ServinglibError, match="not READY in every worker"):
            client.promote("scorer", "4")
        client.load("scorer", "1")
        assert set(client.wait_for("scorer", "1").values()) == {"READY"}
        before = load.versions["1"]
        client.promote("scorer", "1")
        deadline = threading.Event()
        while load.versions["1"] < before + 50 and not deadline.wait(0.05):
            pass
        client.rollback("scorer")
        after_rollback = sum(load.versions.values())
        while sum(load.versions.values()) < after_rollback + 50 and not deadline.wait(0.05):
            pass
        revision = client.unload("scorer", "1")["revision"]
        client.wait_converged(revision)
    assert load.errors == []
    assert set(load.statuses) == {200}, load.statuses
    assert load.versions["1"] >= 50
    assert load.versions["2"] >= 50
    status = client.status()
    assert status["desired"]["models"]["scorer"]["default"] == "2"
    assert all(r["models"]["scorer"]["default"] == "2" for r in status["workers"].values()), (
        json.dumps(status)
    )
    models = requests.get(f"{server.url}/models", timeout=5).json()["models"]
    assert [v["version"] for v in models[0]["versions"]] in (["2", "4"], ["2"])
    with pytest.raises(ServinglibError, match="no earlier default"):
        client.rollback("scorer")
    with pytest.raises(ServinglibError, match="is the default version"):
        client.unload("scorer", "2")


def _raw(port: int, request: bytes) -> tuple[int, dict[str, Any]]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def _listening_inode(port: int) -> str:
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # LISTEN
            return fields[9]
    raise AssertionError(f"nothing listens on {port}")


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def test_the_admin_listener_answers_hostile_requests_with_json_and_workers_do_not_hold_it(
    tmp_path: Path, start_server: Any
) -> None:
    port = free_port()
    server: LiveServer = start_server(
        admin_service(tmp_path, port), "--workers", "2", env={"SERVINGLIB_ADMIN_TOKEN": TOKEN}
    )
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
    deep = b"[" * 100_000 + b"]" * 100_000
    status, body = _raw(
        port,
        b"POST /admin/models/scorer/promote HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        + auth
        + b"Content-Length: %d\r\n\r\n" % len(deep)
        + deep[: 60 * 1024],
    )
    assert status in (400, 413), body
    nested = b'{"version": ' + b"[" * 50 + b"]" * 50 + b"}"
    status, body = _raw(
        port,
        b"POST /admin/models/scorer/promote HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        + auth
        + b"Content-Length: %d\r\n\r\n" % len(nested)
        + nested,
    )
    assert status == 400
    assert "nests deeper" in body["error"], body
    for method in (b"PUT", b"DELETE", b"PATCH"):
        request = b"%s /admin/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % method
        assert _raw(port, request + b"\r\n")[0] == 401  # the token first
        status, body = _raw(port, request + auth + b"\r\n")
        assert status == 405
        assert "takes GET and POST" in body["error"]
    status, body = _raw(port, b"BREW /\x00 HTTP/9.9\r\n\r\n")
    assert 400 <= status < 600
    assert body["error"]
    # An idle connection is closed by the listener (a master thread is not held for ever).
    with socket.create_connection(("127.0.0.1", port), timeout=60) as idle:
        assert idle.recv(1) == b""
    # Only the master holds the admin listening socket.
    inode = _listening_inode(port)
    assert inode in _socket_inodes(server.process.pid)
    workers = [
        int(p)
        for p in Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
        .read_text()
        .split()
    ]
    assert len(workers) == 2
    for pid in workers:
        assert inode not in _socket_inodes(pid), f"worker {pid} holds the admin socket"


def test_workers_killed_between_admin_actions_converge_exactly(
    tmp_path: Path, start_server: Any
) -> None:
    import signal
    import time

    port = free_port()
    server: LiveServer = start_server(
        admin_service(tmp_path, port), "--workers", "2", env={"SERVINGLIB_ADMIN_TOKEN": TOKEN}
    )
    client = AdminClient(port, TOKEN)
    actions = [
        lambda: client.load("scorer", "1"),
        lambda: client.promote("scorer", "1"),
        lambda: client.unload("scorer", "2"),
        lambda: client.load("scorer", "2"),
        lambda: client.promote("scorer", "2"),
        lambda: client.unload("scorer", "1"),
    ]
    for step, action in enumerate(actions):
        revision = action()["revision"]
        client.wait_converged(revision)
        wait_all_workers(server)
        victim = min(worker_pids(server))
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 90
        while True:  # the replacement has joined and reported the same revision
            workers = client.status()["workers"]
            pids = {int(pid) for pid in workers}
            applied = all(report.get("revision", -1) >= revision for report in workers.values())
            if len(pids) == 2 and victim not in pids and applied:
                break
            assert time.monotonic() < deadline, f"step {step}: {json.dumps(workers)}"
            time.sleep(0.1)
        desired = client.status()["desired"]["models"]["scorer"]
        seen = {
            pid: (
                report["models"]["scorer"]["default"],
                sorted(
                    v
                    for v, s in report["models"]["scorer"]["versions"].items()
                    if s["state"] == "READY"
                ),
            )
            for pid, report in workers.items()
        }
        assert len(set(map(str, seen.values()))) == 1, f"step {step}: workers differ: {seen}"
        default, versions = next(iter(seen.values()))
        if desired.get("default"):
            assert default == desired["default"], f"step {step}: {seen}"
        assert not set(desired.get("unload", [])) & set(versions), f"step {step}: {seen}"
