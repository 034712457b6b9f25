"""A policy against synthetic traffic: the real controller and gates, simulated workers.

It answers "how often would this policy roll back a candidate that is as good as the
baseline, and how fast does it catch a bad one?" without a server: each tick sends
``requests_per_tick`` requests through the current traffic split; failures and latencies
are drawn from seeded distributions and counted into the same cumulative per-version
counters and latency buckets the workers export.

Example::

    outcome = simulate(policy, Behaviour(), Behaviour(error_rate=0.05), seed=3)
    outcome.status   # "rolled_back"
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servinglib.config.rollout_policy import RolloutPolicy
from servinglib.config.spec import ModelConfig, ServiceConfig
from servinglib.delivery.controller import RolloutController
from servinglib.delivery.evidence import Counts, Snapshot
from servinglib.lifecycle.rollout_state import ACTIVE, RolloutState
from servinglib.monitoring.metric_specs import REQUEST_BUCKETS

__all__ = ["Behaviour", "Outcome", "simulate"]

_BOUNDS = (*REQUEST_BUCKETS, float("inf"))


@dataclass(frozen=True)
class Behaviour:
    """One version: its failure rate and log-normal latency (median, spread)."""

    error_rate: float = 0.0
    median_s: float = 0.02
    sigma: float = 0.3


@dataclass
class Outcome:
    """How a simulated rollout ended."""

    status: str
    step: int
    ticks: int
    state: RolloutState


@dataclass
class _World:
    """The simulated workers: the traffic split and the cumulative counters."""

    baseline: str
    candidate: str
    behaviours: dict[str, Behaviour]
    rng: random.Random
    t: float = 0.0
    default: str = ""
    weights: dict[str, float] = field(default_factory=dict)
    counts: dict[str, Counts] = field(default_factory=dict)

    # --- Actions ---
    def default_version(self, model: str) -> str:
        return self.default or self.baseline

    def ensure_loaded(self, model: str, version: str) -> None:
        pass

    def ready_states(self, model: str, version: str) -> dict[str, str]:
        return {"1": "READY", "2": "READY"}

    def set_traffic(self, model: str, weights: dict[str, float]) -> None:
        self.weights = dict(weights)

    def promote(self, model: str, version: str) -> None:
        self.default = version

    # --- traffic ---
    def serve(self, requests: int) -> None:
        total = sum(self.weights.values()) or 1.0
        for _ in range(requests):
            point, version = self.rng.random() * total, self.default_version("")
            for name, weight in self.weights.items():
                if point < weight:
                    version = name
                    break
                point -= weight
            behaviour = self.behaviours[version]
            counts = self.counts.setdefault(version, Counts())
            counts.requests += 1
            counts.failed += self.rng.random() < behaviour.error_rate
            latency = self.rng.lognormvariate(0.0, behaviour.sigma) * behaviour.median_s
            for bound in _BOUNDS:
                if latency <= bound:
                    counts.buckets[bound] = counts.buckets.get(bound, 0.0) + 1
                    break
        self.t += 1.0

    def snapshots(self, models: Sequence[str]) -> dict[str, Snapshot]:
        versions = {}
        for version, counts in self.counts.items():
            cumulative, running = {}, 0.0
            for bound in _BOUNDS:
                running += counts.buckets.get(bound, 0.0)
                cumulative[bound] = running
            versions[version] = Counts(counts.requests, counts.failed, cumulative)
        return dict.fromkeys(models, Snapshot(self.t, versions))


def simulate(
    policy: RolloutPolicy,
    baseline: Behaviour,
    candidate: Behaviour,
    seed: int,
    requests_per_tick: int = 100,
    max_ticks: int = 10_000,
) -> Outcome:
    """Run ``policy`` to its end (promote or roll back) on simulated traffic."""
    world = _World(
        "1",
        policy.candidate,
        {"1": baseline, policy.candidate: candidate},
        random.Random(seed),  # noqa: S311 (a seeded simulation)
    )
    model = ModelConfig("m", "x:y", Path(), "1", rollout=policy)
    controller = RolloutController(
        ServiceConfig("sim", Path("sim.yaml"), (model,)),
        world,
        read=world.snapshots,
        clock=lambda: world.t,
    )
    state = controller.tick("m")
    ticks = 0
    while state.status in ACTIVE and ticks < max_ticks:
        world.serve(requests_per_tick)
        state = controller.tick("m")
        ticks += 1
    return Outcome(state.status, state.step, ticks, state)
