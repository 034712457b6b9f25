"""The rollout controller with its real gates on simulated traffic (seeded), and the traffic
split it sets reaching a real registry through the desired-state file."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from servinglib.config.rollout_policy import RolloutPolicy, RolloutStep
from servinglib.config.spec import ModelConfig, ServiceConfig, load_config
from servinglib.delivery.controller import RolloutController
from servinglib.delivery.evidence import Snapshot
from servinglib.delivery.simulation import Behaviour, simulate
from servinglib.lifecycle.registry import ModelRegistry
from servinglib.lifecycle.rollout import RolloutWatcher, read_desired_state
from servinglib.lifecycle.rollout_state import read_evidence
from servinglib.serve.admin import AdminServer
from servinglib.serving.lanes import Lane

STEPS = (RolloutStep(25.0, False, 200, 0.0), RolloutStep(50.0, False, 200, 0.0))
BASELINE = Behaviour(error_rate=0.002, median_s=0.02)  # a baseline that fails now and then


def policy(tmp_path: Path, seed: int) -> RolloutPolicy:
    return RolloutPolicy("2", STEPS, tmp_path / f"run-{seed}")


def test_a_candidate_identical_to_the_baseline_is_never_rolled_back_in_20_seeded_runs(
    tmp_path: Path,
) -> None:
    outcomes = [simulate(policy(tmp_path, s), BASELINE, BASELINE, seed=s) for s in range(20)]
    rolled_back = [o.state.decisions[-1] for o in outcomes if o.status != "promoted"]
    assert rolled_back == []  # 0/20 here; 0/200 in benchmarks/rollout_false_decisions.py
    assert all(
        [d["action"] for d in o.state.decisions] == ["start", "advance", "promote"]
        for o in outcomes
    )


@pytest.mark.parametrize(
    ("candidate", "gate"),
    [
        (Behaviour(error_rate=0.05, median_s=0.02), "error_rate"),
        (Behaviour(median_s=0.03), "latency"),
    ],
    ids=["fails-5-percent", "50-percent-slower"],
)
def test_a_bad_candidate_is_rolled_back_in_its_first_step(
    tmp_path: Path, candidate: Behaviour, gate: str
) -> None:
    for seed in range(10):
        outcome = simulate(policy(tmp_path, seed), BASELINE, candidate, seed=seed)
        assert outcome.status == "rolled_back", outcome.state.decisions
        assert outcome.step == 0
        assert outcome.state.decisions[-1]["reason"].startswith(gate)
        [failed] = [g for g in outcome.state.gates if g["verdict"] == "fail"]
        assert failed["samples"] <= 200  # within the step's min_requests
        assert len(read_evidence(policy(tmp_path, seed).state_dir, "m")) == outcome.ticks


def test_the_traffic_split_reaches_the_lanes_and_is_written_once(tmp_path: Path) -> None:
    fixture = Path(__file__).parents[1] / "fixtures" / "service"
    shutil.copytree(fixture / "models", tmp_path / "models")
    (tmp_path / "servinglib.yaml").write_text((fixture / "servinglib.yaml").read_text())
    config = load_config(tmp_path / "servinglib.yaml", environ={})
    registry = ModelRegistry(config)
    registry.load_all()
    registry.add_version("scorer", "1")
    watcher = RolloutWatcher(registry, tmp_path)
    admin = AdminServer(config, tmp_path, "t" * 40, 0, lambda: {os.getpid()})
    admin.start()
    try:
        revision = admin.set_traffic("scorer", {"2": 50.0, "1": 50.0})
        assert admin.set_traffic("scorer", {"2": 50.0, "1": 50.0}) is None  # idempotent
        assert read_desired_state(tmp_path).revision == revision
        watcher.sync()
        lane = Lane(registry, registry.model_config("scorer"))
        chosen = {lane.route(None, f"user-{i}").version for i in range(200)}
        assert chosen == {"2", "1"}
        admin.set_traffic("scorer", {"2": 100.0})
        watcher.sync()
        assert {lane.route(None, f"user-{i}").version for i in range(200)} == {"2"}
    finally:
        admin.stop()


class _Ready:
    """Actions of workers where every version is loaded and ready."""

    def default_version(self, model: str) -> str:
        return "1"

    def ensure_loaded(self, model: str, version: str) -> None:
        pass

    def ready_states(self, model: str, version: str) -> dict[str, str]:
        return {"1": "READY", "2": "READY"}

    def set_traffic(self, model: str, weights: dict[str, float]) -> None:
        pass

    def promote(self, model: str, version: str) -> None:
        pass


def test_each_tick_reads_the_metric_files_once_for_every_model(tmp_path: Path) -> None:
    reads: list[list[str]] = []
    ticked = threading.Event()

    def read(models: Sequence[str]) -> dict[str, Snapshot]:
        reads.append(list(models))
        if len(reads) >= 3:
            ticked.set()
        return {m: Snapshot(float(len(reads))) for m in models}

    policy = RolloutPolicy("2", STEPS, tmp_path, interval_s=0.01)
    models = tuple(ModelConfig(name, "x:y", Path(), "1", rollout=policy) for name in "abc")
    controller = RolloutController(
        ServiceConfig("s", Path("s.yaml"), models), _Ready(), read=read, readings=lambda *_: {}
    )
    controller.start()
    try:
        assert ticked.wait(30)
    finally:
        controller.stop()
    assert reads[:3] == [["a", "b", "c"]] * 3  # one read per tick, not one per model
