"""The admin API under load: loopback-only, token-protected, and no request ever fails."""

from __future__ import annotations

import json
import shutil
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
from tests.conftest import LiveServer, free_port

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent.parent / "fixtures" / "service"
TOKEN = "s3cret-token-for-tests-only"


def admin_service(tmp_path: Path, port: int) -> Path:
    shutil.copytree(FIXTURE / "models", tmp_path / "models")
    config = tmp_path / "servinglib.yaml"
    text = (FIXTURE / "servinglib.yaml").read_text()
    text = text.replace('default_version: "2"', 'default_version: "2"\n    versions: ["2"]', 1)
    config.write_text(text + f"admin: {{enabled: true, port: {port}}}\n")
    return config


class Load:
    """Unversioned requests in a loop from 4 threads; remembers every status and version."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.statuses: Counter[int] = Counter()
        self.versions: Counter[str] = Counter()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(4)]

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

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


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


def test_admin_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    config = admin_service(tmp_path, free_port())
    result = subprocess.run(
        [sys.executable, "-m", "servinglib.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "SERVINGLIB_ADMIN_TOKEN": ""},
    )
    assert result.returncode == 2
    assert "SERVINGLIB_ADMIN_TOKEN is empty" in result.stderr


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


def test_workers_killed_between_admin_actions_converge_exactly(
    tmp_path: Path, start_server: Any
) -> None:
    import os
    import signal
    import time

    from tests.integration.test_hostile_traffic import all_workers

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
        victim = min(all_workers(server, 2))
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
