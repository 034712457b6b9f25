"""Drift, model-metric and Prometheus gates, a shadow-first rollout and `rollout restart`, end
to end: 2 gunicorn workers, real HTTP load, the controller in the master, a real Prometheus."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import requests

from servinglib.delivery.external import query_prometheus
from servinglib.lifecycle.rollout_state import read_evidence
from servinglib.monitoring.drift import build_profile
from servinglib.serve.admin_client import AdminClient
from tests.conftest import LiveServer, free_port
from tests.integration._delivery import ENV, TOKEN, Load, delivery_service, wait_rollout
from tests.prometheus_server import PrometheusServer

pytestmark = pytest.mark.integration

_MEAN_LATENCY = (
    'sum(servinglib_request_duration_seconds_sum{model="{{model}}",version="{{version}}"}) / '
    'sum(servinglib_request_duration_seconds_count{model="{{model}}",version="{{version}}"})'
)


def _write_profiles(root: Path) -> None:
    """Both versions' reference profile: the ``score`` output spread evenly over [0, 1)."""
    rows = [({}, {"score": (i * 0.6180339887498949) % 1.0}) for i in range(5000)]
    profile = build_profile(rows)
    for version in ("1", "2"):
        profile.save(root / "repo" / version / "profile.json")


def _cli(*args: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "servinglib.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **ENV},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout) if result.stdout.startswith("{") else {"out": result.stdout}


def _versions_answered(load: Load) -> set[str]:
    while True:
        try:
            return {version for _, version in list(load.answers)}
        except RuntimeError:  # a new (status, version) key appeared while copying
            continue


def test_a_shadow_first_rollout_gated_on_drift_metrics_and_prometheus_is_promoted(
    tmp_path: Path, start_server: Any
) -> None:
    if shutil.which("prometheus") is None:
        pytest.skip("needs Debian's prometheus package (.ci/run installs it)")
    admin_port, port = free_port(), free_port()
    prometheus = PrometheusServer(tmp_path / "prometheus", [f"127.0.0.1:{port}"])
    try:
        config = delivery_service(
            tmp_path,
            admin_port,
            candidate={},  # the baseline's twin: every gate holds
            model={"shadow": [{"version": "2"}]},
            steps=[{"shadow": True}, {"weight": 50, "min_seconds": 2}],
            gates={
                "shadow_agreement": {"min": 0.9},
                "drift": {"role": "output", "max_increase": 0.1, "min_samples": 60},
                "metrics": [
                    {"name": "accepted", "counter": "offers_accepted", "max_decrease": 0.1},
                    {"name": "basket", "histogram": "basket_eur", "max_decrease": 2},
                ],
                "prometheus": [
                    {
                        "name": "mean_latency",
                        "url": prometheus.url,
                        "query": _MEAN_LATENCY,
                        "max_increase": 0.05,
                    }
                ],
            },
        )
        _write_profiles(tmp_path)
        server: LiveServer = start_server(config, env=ENV, port=port)
        client = AdminClient(admin_port, TOKEN)
        with Load(server.url) as load:
            # While the rollout is on its shadow step, no user gets an answer of version 2.
            while True:
                answered = _versions_answered(load)
                rollout = client.rollouts()["m"]
                if rollout["step"] != 0 or rollout["status"] != "running":
                    break
                assert answered <= {"1"}, answered
                load.wait_answers(10)
            rollout = wait_rollout(client, {"promoted", "rolled_back", "paused"}, timeout_s=120)
            load.wait_answers(50)
        assert load.errors == []
        assert rollout["status"] == "promoted", json.dumps(rollout, indent=1)
        assert [d["action"] for d in rollout["decisions"]] == ["start", "advance", "promote"]
        gates = {g["gate"]: g for g in rollout["gates"]}
        assert set(gates) == {
            "error_rate",
            "latency",
            "shadow_agreement",
            "drift",
            "metric:accepted",
            "metric:basket",
            "prometheus:mean_latency",
        }
        assert {g["verdict"] for g in gates.values()} == {"pass"}, gates
        assert gates["drift"]["samples"] >= 60
        assert gates["drift"]["candidate"] < 0.1, gates["drift"]
        assert 0.4 < gates["metric:accepted"]["candidate"] < 0.8, gates["metric:accepted"]
        assert 20 < gates["metric:basket"]["candidate"] < 40, gates["metric:basket"]
        assert 0 < gates["prometheus:mean_latency"]["candidate"] < 1, gates["prometheus:mean"]
        # The server's own counters: the shadow step's windows hold comparisons only.
        evidence = read_evidence(tmp_path / ".servinglib" / "rollouts", "m")
        shadow_step = [e for e in evidence if e["step"] == 0]
        assert shadow_step
        assert {e["candidate"]["requests"] for e in shadow_step} == {0}
        assert shadow_step[-1]["shadow"]["comparisons"] >= 80
        assert [g["gate"] for g in shadow_step[-1]["gates"]] == ["shadow_agreement"]
        # The readout replays every gate from the persisted readings, Prometheus's included.
        out = tmp_path / "report"
        printed = _cli("rollout", "report", "m", "--config", str(config), "--out", str(out))
        assert "every verdict reproduced" in printed["out"]
        document = json.loads((out / "rollout.json").read_text())
        assert {"drift", "metric:basket", "prometheus:mean_latency"} <= set(document["series"])
        assert (out / "gate-prometheus:mean_latency.png").stat().st_size > 1000
        # A query Prometheus refuses is an error with its reason, not an empty result.
        with pytest.raises(OSError, match=r"HTTP 400 for query 'sum\('.*parse error"):
            query_prometheus(prometheus.url, "sum(", 5)
    finally:
        prometheus.close()


def test_a_candidate_worse_on_a_business_metric_is_rolled_back_then_restarted(
    tmp_path: Path, start_server: Any
) -> None:
    port = free_port()
    config = delivery_service(
        tmp_path,
        port,
        candidate={"accept_percent": 30},  # the baseline accepts 60 %
        steps=[{"weight": 50}],
        min_requests=160,
        gates={
            "metrics": [{"name": "accepted", "counter": "offers_accepted", "max_decrease": 0.05}]
        },
    )
    server: LiveServer = start_server(config, env=ENV)
    client = AdminClient(port, TOKEN)
    status, body = client.call("POST", "/admin/rollouts/m/restart")
    assert status == 409, body
    assert "restart applies to a rollout that is aborted or rolled_back" in body["error"]
    with Load(server.url) as load:
        rollout = wait_rollout(client, {"rolled_back", "promoted"})
        assert rollout["status"] == "rolled_back", rollout
        reason = rollout["decisions"][-1]["reason"]
        assert reason.startswith("metric:accepted: offers_accepted per requests"), reason
        assert "two-proportion z-test, margin 0.05" in reason, reason
        [gate] = [g for g in rollout["gates"] if g["gate"] == "metric:accepted"]
        assert gate["verdict"] == "fail"
        assert gate["candidate"] < gate["baseline"] - 0.05
        # The operator's way to try again: no state file to delete.
        restarted = _cli("rollout", "restart", "m", "--port", str(port))
        assert restarted["status"] == "running"
        assert restarted["step"] == 0
        assert [d["action"] for d in restarted["decisions"]] == ["restart"]
        assert "after rolled_back" in restarted["decisions"][0]["reason"]
        again = wait_rollout(client, {"rolled_back", "promoted"})
        load.wait_answers(20)
    assert again["status"] == "rolled_back", again
    assert [d["action"] for d in again["decisions"]] == ["restart", "rollback"]
    assert Counter(v for _, v in load.answers)["2"] > 0


def test_a_dead_prometheus_pauses_the_rollout_and_a_drifted_candidate_is_rolled_back(
    tmp_path: Path, start_server: Any
) -> None:
    port, dead = free_port(), free_port()  # nothing listens on `dead`
    config = delivery_service(
        tmp_path,
        port,
        candidate={"score_power": 3},  # its scores pile up near 0: output drift
        steps=[{"weight": 50}],
        min_requests=200,
        gates={
            "drift": {"role": "output", "max_increase": 0.1},
            "prometheus": [
                {
                    "name": "errors",
                    "url": f"http://127.0.0.1:{dead}",
                    "query": 'sum(rate(servinglib_requests_total{version="{{version}}"}[1m]))',
                    "max_increase": 1,
                    "timeout_s": 2,
                }
            ],
        },
    )
    _write_profiles(tmp_path)
    server: LiveServer = start_server(config, env=ENV)
    client = AdminClient(port, TOKEN)
    # No traffic yet, so no gate can fail: the unreadable query alone pauses the rollout
    # (with traffic, a drift failure seen at the same look rolls back at once instead).
    wait_rollout(client, {"paused"})
    with Load(server.url) as load:
        rollout = wait_rollout(client, {"rolled_back", "promoted"})
        load.wait_answers(20)
    assert rollout["status"] == "rolled_back", rollout
    # The unreadable query paused it at once; paused, the failing drift gate rolled it back.
    assert [d["action"] for d in rollout["decisions"]] == ["start", "pause", "rollback"]
    pause = rollout["decisions"][1]["reason"]
    assert pause.startswith("evidence missing, resume when fixed"), pause
    assert f"prometheus:errors: query failed: http://127.0.0.1:{dead}" in pause
    assert '"event": "rollout_pause"' in server.wait_for_log('"event": "rollout_pause"')
    reason = rollout["decisions"][-1]["reason"]
    assert reason.startswith("drift: output 'score': PSI"), reason
    [gate] = [g for g in rollout["gates"] if g["gate"] == "drift"]
    assert gate["candidate"] > gate["threshold"] > gate["baseline"]
    assert gate["p_value"] < 0.01 / 4
    models = requests.get(f"{server.url}/models", timeout=5).json()["models"]
    assert models[0]["rollout"]["status"] == "rolled_back"
