"""``rollout:`` of a model entry: a candidate version, its steps and the gates it must pass.

Example (in servinglib.yaml)::

    rollout:
      candidate: "3"
      min_requests: 200          # per step, for the candidate (the default of every step)
      min_seconds: 30
      steps: [{shadow: true}, {weight: 10}, {weight: 50}]
      gates:
        error_rate: {max_increase: 0.01}      # or {max: 0.02}: absolute
        latency: {quantile: 0.95, max_ratio: 1.2}
        shadow_agreement: {min: 0.98}
        drift: {role: output, max_increase: 0.1}    # more: servinglib.config.rollout_gates

Parsing beyond the JSON Schema lives here: the candidate must exist, a shadow step needs
the candidate among the model's shadows, and the admin API must be on (the controller
acts through it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servinglib.config.checks import resolve_inside
from servinglib.config.rollout_gates import (
    DriftGate,
    MetricGate,
    QueryGate,
    parse_drift_gate,
    parse_metric_gates,
    parse_query_gates,
)
from servinglib.errors import ConfigError

__all__ = ["ErrorGate", "LatencyGate", "RolloutPolicy", "RolloutStep", "parse_rollout"]


@dataclass(frozen=True)
class RolloutStep:
    """One step: ``weight`` % of unversioned traffic, or shadow copies only (weight 0)."""

    weight: float
    shadow: bool
    min_requests: int
    min_seconds: float


@dataclass(frozen=True)
class ErrorGate:
    """Failed predictions (5xx outcomes): ``max`` absolute, or baseline + ``max_increase``."""

    max: float | None = None
    max_increase: float | None = None


@dataclass(frozen=True)
class LatencyGate:
    """The candidate's ``quantile`` may be at most ``max_ratio`` times the baseline's."""

    quantile: float = 0.95
    max_ratio: float = 1.2


@dataclass(frozen=True)
class RolloutPolicy:
    """A validated ``rollout:`` policy; ``state_dir`` is resolved inside the config root."""

    candidate: str
    steps: tuple[RolloutStep, ...]
    state_dir: Path
    alpha: float = 0.01
    interval_s: float = 1.0
    error_rate: ErrorGate | None = field(default_factory=lambda: ErrorGate(max_increase=0.0))
    latency: LatencyGate | None = field(default_factory=LatencyGate)
    shadow_agreement: float | None = None
    drift: DriftGate | None = None
    metrics: tuple[MetricGate, ...] = ()
    queries: tuple[QueryGate, ...] = ()


def parse_rollout(
    entry: Mapping[str, Any], raw: Mapping[str, Any], root: Path, label: str, where: str
) -> RolloutPolicy | None:
    """The policy of one model entry (None without ``rollout:``).

    Raises:
        ConfigError: naming the key and the fix.
    """
    spec = entry.get("rollout")
    if spec is None:
        return None
    here = f"{where}.rollout"
    if not raw.get("admin", {}).get("enabled", False):
        raise ConfigError(
            "a rollout acts through the admin API; set `admin: {enabled: true}` (and its token)",
            source=label,
            key_path=here,
        )
    candidate = spec["candidate"]
    default = str(entry["default_version"])
    if candidate == default:
        raise ConfigError(
            f"the candidate {candidate!r} is already the default version; name the new version",
            source=label,
            key_path=f"{here}.candidate",
        )
    repository = root / entry["repository"]
    if not (repository / candidate).is_dir():
        raise ConfigError(
            f"version {candidate!r} has no directory in {repository}; add it or fix the name",
            source=label,
            key_path=f"{here}.candidate",
        )
    shadows = {s["version"] for s in entry.get("shadow", [])}
    steps = []
    for i, step in enumerate(spec["steps"]):
        shadow = bool(step.get("shadow", False))
        if shadow and "weight" in step:
            raise ConfigError(
                "a step is either `shadow: true` or `weight: N`, not both",
                source=label,
                key_path=f"{here}.steps[{i}]",
            )
        if not shadow and "weight" not in step:
            raise ConfigError(
                "a step needs `weight: N` (percent of traffic) or `shadow: true`",
                source=label,
                key_path=f"{here}.steps[{i}]",
            )
        if shadow and candidate not in shadows:
            raise ConfigError(
                f"a shadow step needs the candidate {candidate!r} in this model's `shadow:` list",
                source=label,
                key_path=f"{here}.steps[{i}]",
            )
        steps.append(
            RolloutStep(
                weight=0.0 if shadow else float(step["weight"]),
                shadow=shadow,
                min_requests=int(step.get("min_requests", spec.get("min_requests", 200))),
                min_seconds=float(step.get("min_seconds", spec.get("min_seconds", 30))),
            )
        )
    gates = spec.get("gates", {})
    errors = gates.get("error_rate", {"max_increase": 0.0})
    if errors is not None and ("max" in errors) == ("max_increase" in errors):
        raise ConfigError(
            "error_rate takes one of `max` (absolute) or `max_increase` (over the baseline)",
            source=label,
            key_path=f"{here}.gates.error_rate",
        )
    latency = gates.get("latency", {})
    agreement = gates.get("shadow_agreement")
    if agreement is not None and not shadows & {candidate}:
        raise ConfigError(
            f"shadow_agreement needs the candidate {candidate!r} in this model's `shadow:` list",
            source=label,
            key_path=f"{here}.gates.shadow_agreement",
        )
    state = spec.get("state_dir", ".servinglib/rollouts")
    return RolloutPolicy(
        candidate=candidate,
        steps=tuple(steps),
        state_dir=resolve_inside(root, state, label=label, key_path=f"{here}.state_dir"),
        alpha=float(spec.get("alpha", 0.01)),
        interval_s=float(spec.get("interval_s", 1.0)),
        error_rate=None if errors is None else ErrorGate(**errors),
        latency=None if latency is None else LatencyGate(**latency),
        shadow_agreement=None if agreement is None else float(agreement["min"]),
        drift=parse_drift_gate(
            gates.get("drift"),
            (repository / default, repository / candidate),
            label,
            f"{here}.gates.drift",
        ),
        metrics=parse_metric_gates(gates.get("metrics", []), label, f"{here}.gates.metrics"),
        queries=parse_query_gates(gates.get("prometheus", []), label, f"{here}.gates.prometheus"),
    )
