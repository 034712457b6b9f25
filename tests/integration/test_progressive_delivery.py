"""Progressive delivery end to end: 2 workers, real HTTP load, the controller in the master."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from servinglib.serve.admin_client import AdminClient
from tests.conftest import LiveServer, free_port, stop, worker_pids
from tests.integration._delivery import (
    ENV,
    TOKEN,
    Load,
    chromium_driver,
    delivery_service,
    version_outcomes,
    wait_rollout,
)

pytestmark = pytest.mark.integration


def test_a_candidate_failing_5_percent_is_rolled_back_in_its_first_window(
    tmp_path: Path, start_server: Any
) -> None:
    port = free_port()
    # 320 requests per step: 5 % failing (about 16 failures against none) is beyond doubt by
    # then; at 160, the failures counted by the first look (4 of 187 in one run) sat on alpha
    config = delivery_service(tmp_path, port, candidate={"fail_every": 20}, min_requests=320)
    server: LiveServer = start_server(config, env=ENV)
    client = AdminClient(port, TOKEN)
    with Load(server.url) as load:
        rollout = wait_rollout(client, {"rolled_back", "promoted"})
        assert rollout["status"] == "rolled_back", rollout
        rollback = rollout["decisions"][-1]
        assert rollback["action"] == "rollback"
        assert rollback["step"] == 0
        assert "error_rate" in rollback["reason"]
        assert "Fisher" in rollback["reason"]
        [gate] = [g for g in rollout["gates"] if g["gate"] == "error_rate"]
        assert gate["verdict"] == "fail"
        assert gate["samples"] <= 320  # within the step's min_requests
        load.wait_answers(200)
        after = load.answers.copy()
    assert load.errors == []
    # The baseline answered every request it got; the candidate keeps its traffic at 0.
    assert set(version_outcomes(server.url, "1")) == {"success"}
    assert version_outcomes(server.url, "2")["model_error"] >= 1
    client.wait_converged(client.status()["desired"]["revision"])  # every worker rolled back
    late = Load(server.url, start=10**6)
    with late:
        late.wait_answers(100)
    assert set(late.answers) == {(200, "1")}, late.answers
    assert after[(200, "1")] > 0


def test_a_good_candidate_walks_every_step_is_promoted_and_its_readout_renders(
    tmp_path: Path, start_server: Any
) -> None:
    port = free_port()
    config = delivery_service(tmp_path, port, candidate={})  # the baseline's twin
    server: LiveServer = start_server(config, env=ENV)
    client = AdminClient(port, TOKEN)
    with Load(server.url) as load:
        running = wait_rollout(client, {"running"}, step=1)
        models = requests.get(f"{server.url}/models", timeout=5).json()["models"]
        assert models[0]["rollout"]["step"] == 1
        assert models[0]["rollout"]["status"] == "running"
        rollout = wait_rollout(client, {"rolled_back", "promoted"})
        load.wait_answers(100)
    assert load.errors == []
    assert rollout["status"] == "promoted", rollout
    assert [d["action"] for d in rollout["decisions"]] == ["start", "advance", "promote"]
    assert {g["gate"] for g in running["gates"]} == {"error_rate", "latency"}
    assert set(load.answers) <= {(200, "1"), (200, "2")}
    # the workers apply the promotion as they read the desired state: once all have
    client.wait_converged(client.status()["desired"]["revision"])
    late = Load(server.url, start=10**6)
    with late:
        late.wait_answers(50)
    assert set(late.answers) == {(200, "2")}, late.answers  # the default everywhere
    assert "rollout_promote" in server.wait_for_log("rollout_promote")  # the JSON-log event
    assert 'servinglib_rollout_decisions_total{action="promote",candidate="2",model="m"} 1.0' in (
        requests.get(f"{server.url}/metrics", timeout=5).text
    )
    out = tmp_path / "report"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "servinglib.cli.main",
            "rollout",
            "report",
            "m",
            "--config",
            str(config),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "every verdict reproduced" in result.stdout
    document = json.loads((out / "rollout.json").read_text())
    assert document["reproduced"]
    assert document["status"] == "promoted"
    assert set(document["series"]) == {"error_rate", "latency"}
    driver = chromium_driver(tmp_path / "chromium-profile")
    try:
        driver.get((out / "index.html").as_uri())
        images = driver.find_elements("css selector", "img.gate")
        assert len(images) == 2
        for image in images:
            width = driver.execute_script(
                "return arguments[0].complete && arguments[0].naturalWidth", image
            )
            assert width > 300, image.get_attribute("src")
        assert "promoted" in driver.find_element("id", "outcome").text
    finally:
        driver.quit()


def test_a_candidate_50_percent_slower_is_rolled_back(tmp_path: Path, start_server: Any) -> None:
    port = free_port()
    config = delivery_service(tmp_path, port, baseline={"delay_ms": 40}, candidate={"delay_ms": 60})
    server: LiveServer = start_server(config, env=ENV)
    client = AdminClient(port, TOKEN)
    with Load(server.url):
        rollout = wait_rollout(client, {"rolled_back", "promoted"})
    assert rollout["status"] == "rolled_back", rollout
    reason = rollout["decisions"][-1]["reason"]
    assert reason.startswith("latency: p95"), reason
    assert "Mann-Whitney" in reason, reason
    [gate] = [g for g in rollout["gates"] if g["gate"] == "latency"]
    assert gate["candidate"] > 1.2 * gate["baseline"]


def _cli(*args: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "servinglib.cli.main", "rollout", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **ENV},
    )
    assert result.returncode == 0, result.stderr
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def _evaluated_after_restart(rollout: dict[str, Any]) -> bool:
    """The window restarted (a note) and the gates have candidate requests in it."""
    noted = any(d["action"] == "note" for d in rollout["decisions"])
    return noted and any(g["samples"] > 0 for g in rollout["gates"])


def test_the_rollout_survives_a_worker_kill_and_resumes_its_step_after_a_master_restart(
    tmp_path: Path, start_server: Any
) -> None:
    port = free_port()
    steps = [{"weight": 25}, {"weight": 50, "min_seconds": 3600}]  # step 1 waits for us
    config = delivery_service(tmp_path, port, candidate={}, steps=steps)
    server: LiveServer = start_server(config, env=ENV)
    client = AdminClient(port, TOKEN)
    with Load(server.url) as load:
        while not wait_rollout(client, {"running"}, step=0)["gates"]:
            load.wait_answers(20)  # the candidate is READY everywhere and has traffic
        os.kill(sorted(worker_pids(server))[0], signal.SIGKILL)
        wait_rollout(client, {"running"}, step=1)
        paused = _cli("pause", "m", "--port", str(port))
        assert paused["status"] == "paused"
        assert paused["step"] == 1
    stop(server.process)  # SIGTERM: the master and its controller go
    server = start_server(config, env=ENV)
    with Load(server.url, start=10**6) as load:
        assert client.rollouts()["m"]["status"] == "paused"
        assert client.rollout_command("m", "resume")["step"] == 1
        # The new master's counters start at 0: a new window, then evidence in it.
        while not _evaluated_after_restart(wait_rollout(client, {"running"})):
            load.wait_answers(20)
        promoted = _cli("promote", "m", "--port", str(port))
        load.wait_answers(50)
    assert promoted["status"] == "promoted", promoted
    assert set(load.answers) <= {(200, "1"), (200, "2")}
    actions = [(d["action"], d["step"]) for d in promoted["decisions"]]
    assert actions[:3] == [("start", 0), ("advance", 1), ("pause", 1)], actions
    assert sorted(actions[3:5]) == [("note", 1), ("resume", 1)], actions
    assert actions[5:] == [("promote", 1)], actions
    client.wait_converged(client.status()["desired"]["revision"])  # every worker promoted
    late = Load(server.url, start=2 * 10**6)
    with late:
        late.wait_answers(50)
    assert set(late.answers) == {(200, "2")}, late.answers
