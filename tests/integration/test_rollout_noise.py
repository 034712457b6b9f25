"""False rollbacks on real noise: 20 seeded rollouts of a candidate identical to its baseline,
through one real ``servinglib serve`` with 2 workers, real HTTP load and the controller in
the master.

Each run is one model of the service (``run-<seed>``, its own rollout, state and counters):
versions 1 and 2 are the same noisy model (1 % random failures, log-normal latency; see
fixtures/delivery/noisy.py) drawing from the run's seed, and the run's requests ``i = 0, 1,
2...`` carry the routing key ``<seed>:<i>``. The runs share the server and its load, so
the whole batch costs one server start and one pass of traffic.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections import Counter
from http.client import HTTPConnection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from servinglib.lifecycle.rollout_state import read_evidence
from servinglib.serve.admin_client import AdminClient
from tests.conftest import LiveServer, free_port
from tests.integration._delivery import ENV, FIXTURE, TOKEN, LoadThreads, all_outcomes

pytestmark = pytest.mark.integration

SEEDS = range(20)
NOISE = {"fail_percent": 1, "median_ms": 4, "sigma": 0.5}  # both versions alike
FINISHED = {"promoted", "rolled_back", "aborted"}


def noisy_service(root: Path, admin_port: int) -> Path:
    """One model per seed, each with an identical candidate and a rollout of two short
    steps; even seeds gate latency at p95, odd ones at p99."""
    shutil.copy(FIXTURE / "noisy.py", root / "noisy.py")
    models = []
    for seed in SEEDS:
        for version in ("1", "2"):
            (root / "repo" / str(seed) / version).mkdir(parents=True)
            behaviour = json.dumps({"seed": seed, **NOISE})
            (root / "repo" / str(seed) / version / "behaviour.json").write_text(behaviour)
        models.append(
            {
                "name": f"run-{seed}",
                "class": "noisy.py:NoisyModel",
                "repository": f"repo/{seed}",
                "default_version": "1",
                "require_self_tests": False,
                "input_schema": {"type": "object"},
                "rollout": {
                    "candidate": "2",
                    "steps": [{"weight": 25}, {"weight": 50}],
                    "min_requests": 100,
                    "min_seconds": 1,
                    "interval_s": 0.5,
                    "gates": {
                        "error_rate": {"max_increase": 0},
                        "latency": {"quantile": 0.95 if seed % 2 == 0 else 0.99},
                    },
                },
            }
        )
    config = {
        "service": "noise",
        "server": {"workers": 2, "threads": 4},
        "admin": {"enabled": True, "port": admin_port},
        "models": models,
    }
    path = root / "servinglib.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class SeededLoad(LoadThreads):
    """Requests from 6 keep-alive threads, round robin over the runs still going; run
    ``s`` sends ``i = 0, 1, 2...`` with routing key ``s:i`` whatever the thread timing."""

    def __init__(self, url: str) -> None:
        parsed = urlsplit(url)
        self.host, self.port = str(parsed.hostname), int(parsed.port or 80)
        self.statuses: Counter[int] = Counter()
        self.errors: list[str] = []
        self._next = dict.fromkeys(SEEDS, 0)
        self._active = list(SEEDS)
        self._turn = 0
        self._lock = threading.Lock()
        super().__init__(6)

    def finish(self, seed: int) -> None:
        """Send no more requests to run ``seed``."""
        with self._lock:
            if seed in self._active:
                self._active.remove(seed)

    def _take(self) -> tuple[int, int] | None:
        with self._lock:
            if not self._active:
                return None
            self._turn = (self._turn + 1) % len(self._active)
            seed = self._active[self._turn]
            i = self._next[seed]
            self._next[seed] += 1
            return seed, i

    def _run(self) -> None:
        # http.client, not requests: a third of the CPU per request, on a shared machine
        connection = HTTPConnection(self.host, self.port, timeout=30)
        try:
            while not self._stop.is_set():
                taken = self._take()
                if taken is None:
                    return
                seed, i = taken
                body = json.dumps({"model_id": f"run-{seed}", "features": {"i": i}})
                headers = {"content-type": "application/json", "x-routing-key": f"{seed}:{i}"}
                try:
                    connection.request("POST", "/infer", body, headers)
                    response = connection.getresponse()
                    response.read()
                except OSError as e:
                    self.errors.append(repr(e))
                    connection.close()
                    continue
                with self._lock:
                    self.statuses[response.status] += 1
        finally:
            connection.close()

    def __enter__(self) -> SeededLoad:
        super().__enter__()
        return self


def test_a_candidate_identical_to_the_baseline_is_never_rolled_back_in_20_seeded_runs(
    tmp_path: Path, start_server: Any
) -> None:
    port = free_port()
    server: LiveServer = start_server(noisy_service(tmp_path, port), env=ENV)
    client = AdminClient(port, TOKEN)
    outcomes: dict[int, dict[str, Any]] = {}
    started = time.monotonic()
    with SeededLoad(server.url) as load:
        while len(outcomes) < len(SEEDS):
            assert time.monotonic() - started < 300, f"unfinished: {client.rollouts()}"
            for name, rollout in client.rollouts().items():
                seed = int(name.removeprefix("run-"))
                if rollout["status"] in FINISHED and seed not in outcomes:
                    outcomes[seed] = rollout
                    load.finish(seed)
            time.sleep(0.5)
    print(f"20 rollouts in {time.monotonic() - started:.1f}s, answers {dict(load.statuses)}")
    assert load.errors == []
    assert set(load.statuses) <= {200, 500}, load.statuses
    rolled_back = {s: o["decisions"][-1] for s, o in outcomes.items() if o["status"] != "promoted"}
    print(f"identical candidates rolled back: {len(rolled_back)}/{len(SEEDS)} {rolled_back}")
    assert rolled_back == {}
    for outcome in outcomes.values():
        assert [d["action"] for d in outcome["decisions"]] == ["start", "advance", "promote"]
        assert {g["gate"]: g["verdict"] for g in outcome["gates"]} == {
            "error_rate": "pass",
            "latency": "pass",
        }
    # How close noise came: the smallest p-value and the largest latency ratio at any look
    # (a gate fails at p < alpha / 4 = 0.0025, and latency only past a ratio of 1.2).
    looked = [
        gate
        for seed in SEEDS
        for window in read_evidence(tmp_path / ".servinglib" / "rollouts", f"run-{seed}")
        if window["look"]
        for gate in window["gates"]
    ]
    p_min = {
        n: min(g["p_value"] for g in looked if g["gate"] == n) for n in ("error_rate", "latency")
    }
    latency = [g for g in looked if g["gate"] == "latency" and g["baseline"] > 0]
    ratio = max(g["candidate"] / g["baseline"] for g in latency)
    print(f"{len(looked)} gate looks: smallest p {p_min}, largest latency ratio {ratio:.2f}")
    # The noise was genuine: both versions failed now and then, at the same 1 % rate.
    failed: Counter[str] = Counter()
    answered: Counter[str] = Counter()
    for (model, version), counts in all_outcomes(server.url).items():
        if model.startswith("run-"):
            failed[version] += counts["model_error"]
            answered[version] += counts.total()
    print(f"failed/answered per version: {dict(failed)} / {dict(answered)}")
    for version in ("1", "2"):
        assert 0.003 < failed[version] / answered[version] < 0.03, (failed, answered)
