"""The shadow process: copies answered in a child at the lowest CPU priority, never wedged."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from servinglib.errors import DeadlineExceededError, ModelNotReadyError
from servinglib.shadow.process import ShadowProcess, ShadowProcessError
from tests.conftest import launch, stop

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent.parent / "fixtures" / "reliability"


def write_service(directory: Path) -> Path:
    """Model ``m``: version 1 answers, version 2 (a copy) is its shadow."""
    shutil.copytree(FIXTURE / "models", directory / "models")
    versions = directory / "models" / "misbehaving"
    shutil.copytree(versions / "1", versions / "2")
    config = directory / "servinglib.yaml"
    config.write_text(
        "service: shadow-process\n"
        "models:\n"
        "  - name: m\n"
        "    class: models/misbehaving/model.py:Misbehaving\n"
        "    repository: models/misbehaving\n"
        "    default_version: '1'\n"
        "    instances: 2\n"
        "    shadow:\n"
        "      - {version: '2', sample_rate: 1.0}\n"
    )
    return config


@pytest.fixture
def shadows(tmp_path: Path) -> Iterator[ShadowProcess]:
    process = ShadowProcess(write_service(tmp_path), kill_margin_s=0.5, restart_s=0.0)
    process.start()
    assert process.wait_loaded(120)
    yield process
    process.close()


def send_copy(shadows: ShadowProcess, features: object) -> object:
    return shadows.call("m", "2", features, timeout_s=5.0)


def test_copies_run_in_a_child_at_the_lowest_cpu_priority(shadows: ShadowProcess) -> None:
    answer = send_copy(shadows, {"pid": True})
    assert answer == {"ok": True, "pid": shadows.pid}
    assert shadows.pid != os.getpid()
    assert shadows.pid is not None
    assert os.getpriority(os.PRIO_PROCESS, shadows.pid) == 19
    assert os.sched_getscheduler(shadows.pid) == os.SCHED_IDLE  # preempted by any worker


def test_a_failing_copy_reports_the_models_error(shadows: ShadowProcess) -> None:
    with pytest.raises(ShadowProcessError, match="AttributeError"):
        send_copy(shadows, ["not", "a", "mapping"])


def test_a_hung_copy_is_killed_and_the_process_restarts(shadows: ShadowProcess) -> None:
    hung = shadows.pid
    with pytest.raises(DeadlineExceededError):
        shadows.call("m", "2", {"hang": True}, timeout_s=0.2)
    assert hung is not None
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(hung, 0)
    with pytest.raises(ModelNotReadyError, match="loading"):  # the next copy starts a new one
        send_copy(shadows, {})
    assert shadows.wait_loaded(120)
    assert send_copy(shadows, {"pid": True}) == {"ok": True, "pid": shadows.pid}
    assert shadows.pid != hung


def test_an_unknown_version_is_not_ready(shadows: ShadowProcess) -> None:
    with pytest.raises(ModelNotReadyError, match="has no version '7'"):
        shadows.call("m", "7", {}, timeout_s=5.0)


def test_each_answer_reports_the_cpu_seconds_it_took(tmp_path: Path) -> None:
    spent: list[float] = []
    process = ShadowProcess(write_service(tmp_path), on_cpu=spent.append)
    process.start()
    try:
        assert process.wait_loaded(120)
        process.call("m", "2", {}, timeout_s=30.0)  # the first call's own costs
        spent.clear()
        process.call("m", "2", {"sleep_s": 0.1}, timeout_s=30.0)  # waits: next to no CPU
        process.call("m", "2", {"burn_cpu_s": 0.2, "sleep_s": 0}, timeout_s=30.0)  # computes
    finally:
        process.close()
    assert len(spent) == 2, spent
    asleep, burning = spent
    assert burning >= 0.2, spent  # what the copy computed, however long it waited for a core
    assert asleep < burning / 2, spent


def test_close_stops_the_child(shadows: ShadowProcess) -> None:
    pid = shadows.pid
    assert pid is not None
    shadows.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_server_runs_its_shadows_in_a_child_of_each_worker(tmp_path: Path) -> None:
    config = write_service(tmp_path)
    database = tmp_path / "predictions.db"
    config.write_text(
        config.read_text() + "shadow_executor: {isolation: process}\n"
        f"monitoring:\n  prediction_log: {{url: 'sqlite:///{database}', flush_interval_ms: 100}}\n"
    )
    server = launch(config, tmp_path, "--workers", "2")
    try:
        workers = set()
        for i in range(20):
            response = requests.post(
                f"{server.url}/infer",
                json={"model_id": "m", "features": {"pid": True}},
                headers={"Connection": "close", "x-request-id": f"r{i}"},
                timeout=30,
            )
            assert response.status_code == 200, response.text
            workers.add(response.json()["output"]["pid"])
        rows = wait_for_shadow_rows(database, 20)
        children = {json.loads(output)["pid"] for (output,) in rows}
        assert not children & workers  # the copies ran elsewhere ...
        for child in children:  # ... in children of the workers, at the lowest priority
            assert parent_of(child) in workers
            assert os.getpriority(os.PRIO_PROCESS, child) == 19
    finally:
        stop(server.process)
    deadline = time.monotonic() + 30  # the workers stop their shadow processes on the way out
    while any(Path(f"/proc/{child}").exists() for child in children):
        assert time.monotonic() < deadline, f"shadow processes {children} outlived the server"
        time.sleep(0.1)


def wait_for_shadow_rows(database: Path, count: int, timeout_s: float = 120) -> list[tuple[str]]:
    """The shadow rows of the prediction log, once there are ``count`` of them."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows: list[tuple[str]] = []
        if database.exists():
            with sqlite3.connect(database) as connection:
                query = "SELECT output FROM predictions WHERE shadow_of IS NOT NULL"
                rows = connection.execute(query).fetchall()
        if len(rows) >= count or time.monotonic() > deadline:
            assert len(rows) >= count, f"{len(rows)} shadow rows after {timeout_s} s"
            return rows
        time.sleep(0.1)


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])
