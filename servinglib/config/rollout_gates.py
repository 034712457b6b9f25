"""The gates of a ``rollout:`` policy beyond errors and latency: drift, model metrics and
Prometheus queries.

Example (under ``rollout.gates``)::

    drift: {role: output, max_increase: 0.1}       # or {max: 0.25}: absolute PSI
    metrics:
      - {name: accepted, counter: offers_accepted, max_decrease: 0.02}   # a rate per request
      - {name: basket, histogram: basket_eur, max_decrease: 2.0}         # a mean
    prometheus:
      - name: upstream_errors
        url: http://prometheus:9090
        query: sum(rate(payments_failed_total{version="{{version}}"}[1m]))
        max_increase: 0.5

Each threshold is one of ``max`` / ``min`` (absolute) or ``max_increase`` /
``max_decrease`` (over / under the baseline's value); ``min`` and ``max_decrease`` mean
"higher is better".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from servinglib.errors import ConfigError

__all__ = [
    "BOUND_KEYS",
    "Bound",
    "DriftGate",
    "MetricGate",
    "QueryGate",
    "fill",
    "parse_drift_gate",
    "parse_metric_gates",
    "parse_query_gates",
]

BOUND_KEYS = ("max", "min", "max_increase", "max_decrease")
_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_METRIC_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_PROFILE_FILE = "profile.json"  # servinglib.monitoring.drift.profile.PROFILE_FILE


@dataclass(frozen=True)
class Bound:
    """A threshold: ``key`` is one of :data:`BOUND_KEYS`."""

    key: str
    value: float

    @property
    def higher_is_better(self) -> bool:
        """``min`` and ``max_decrease``: the candidate must not fall below."""
        return self.key in ("min", "max_decrease")

    @property
    def relative(self) -> bool:
        """Against the baseline's value (``max_increase``, ``max_decrease``)."""
        return self.key.startswith("max_")

    def limit(self, baseline: float) -> float:
        """The worst value the candidate may have."""
        if not self.relative:
            return self.value
        return baseline - self.value if self.higher_is_better else baseline + self.value

    def worse(self, candidate: float, baseline: float) -> bool:
        """The candidate is past the limit."""
        limit = self.limit(baseline)
        return candidate < limit if self.higher_is_better else candidate > limit

    def describe(self) -> str:
        """``max_increase 0.1`` and the like."""
        return f"{self.key} {self.value:g}"


@dataclass(frozen=True)
class DriftGate:
    """The candidate's worst PSI over the fields of ``role`` (input, output or any)."""

    role: str
    fields: tuple[str, ...]
    bound: Bound
    min_samples: int


@dataclass(frozen=True)
class MetricGate:
    """A model's own metric: ``counter`` per ``per`` (a rate), or ``histogram``'s mean."""

    name: str
    counter: str | None
    per: str
    histogram: str | None
    bound: Bound


@dataclass(frozen=True)
class QueryGate:
    """A PromQL ``query`` (``{{model}}``, ``{{version}}`` filled in) on ``url``."""

    name: str
    url: str
    query: str
    bound: Bound
    timeout_s: float


def _bound(spec: Mapping[str, Any], allowed: tuple[str, ...], label: str, where: str) -> Bound:
    given = [k for k in BOUND_KEYS if k in spec]
    if len(given) != 1 or given[0] not in allowed:
        raise ConfigError(
            f"give exactly one threshold of {', '.join(f'`{k}`' for k in allowed)} "
            f"(found {', '.join(f'`{k}`' for k in given) or 'none'})",
            source=label,
            key_path=where,
        )
    return Bound(given[0], float(spec[given[0]]))


def parse_drift_gate(
    spec: Mapping[str, Any] | None,
    versions: tuple[Path, Path],
    label: str,
    where: str,
) -> DriftGate | None:
    """The drift gate; ``versions``: the baseline's and the candidate's directories."""
    if spec is None:
        return None
    bound = _bound(spec, ("max", "max_increase"), label, where)
    needed = versions if bound.relative else versions[1:]
    for directory in needed:
        profile = directory / _PROFILE_FILE
        if not profile.is_file():
            raise ConfigError(
                f"the drift gate compares live answers with a reference profile, and "
                f"{profile} is missing; build it (`servinglib profile`) or drop the gate",
                source=label,
                key_path=where,
            )
    return DriftGate(
        role=str(spec.get("role", "any")),
        fields=tuple(spec.get("fields", ())),
        bound=bound,
        min_samples=int(spec.get("min_samples", 100)),
    )


def parse_metric_gates(
    specs: list[Mapping[str, Any]], label: str, where: str
) -> tuple[MetricGate, ...]:
    """The gates on the model's own metrics (``self.metrics`` in model code)."""
    gates = []
    for i, spec in enumerate(specs):
        here = f"{where}[{i}]"
        if ("counter" in spec) == ("histogram" in spec):
            raise ConfigError(
                "a metric gate reads one `counter` (a rate per request) or one `histogram` "
                "(its mean); give exactly one",
                source=label,
                key_path=here,
            )
        kind = "counter" if "counter" in spec else "histogram"
        name = str(spec[kind])
        if not _METRIC_NAME.match(name) or name.startswith("servinglib_"):
            raise ConfigError(
                f"{name!r} is not a model metric name: use the name model code passes to "
                f"self.metrics.{kind}(...), without the servinglib_ prefix",
                source=label,
                key_path=f"{here}.{kind}",
            )
        if kind == "counter" and name.endswith("_total"):
            raise ConfigError(
                f"leave '_total' out: the counter is {name.removesuffix('_total')!r} "
                "(exported as '<name>_total')",
                source=label,
                key_path=f"{here}.counter",
            )
        if kind == "histogram" and "per" in spec:
            raise ConfigError(
                "`per` divides a counter; a histogram gate compares means",
                source=label,
                key_path=f"{here}.per",
            )
        allowed = BOUND_KEYS if kind == "counter" else ("max_increase", "max_decrease")
        bound = _bound(spec, allowed, label, here)
        gates.append(
            MetricGate(
                name=str(spec.get("name", name)),
                counter=name if kind == "counter" else None,
                per=str(spec.get("per", "requests")),
                histogram=name if kind == "histogram" else None,
                bound=bound,
            )
        )
    _unique([g.name for g in gates], label, where)
    return tuple(gates)


def parse_query_gates(
    specs: list[Mapping[str, Any]], label: str, where: str
) -> tuple[QueryGate, ...]:
    """The gates on Prometheus queries."""
    gates = []
    for i, spec in enumerate(specs):
        here = f"{where}[{i}]"
        url = str(spec["url"]).rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
            raise ConfigError(
                f"{url!r} is not a Prometheus server URL; give its base, e.g. "
                "http://prometheus:9090 (the query goes in `query`)",
                source=label,
                key_path=f"{here}.url",
            )
        query = str(spec["query"])
        names = set(_PLACEHOLDER.findall(query))
        if names - {"model", "version"}:
            raise ConfigError(
                f"unknown placeholder(s) {sorted(names - {'model', 'version'})} in the query; "
                "only {{model}} and {{version}} are filled in",
                source=label,
                key_path=f"{here}.query",
            )
        if "version" not in names:
            raise ConfigError(
                'the query needs {{version}} (e.g. version="{{version}}"): it runs once for '
                "the baseline and once for the candidate",
                source=label,
                key_path=f"{here}.query",
            )
        gates.append(
            QueryGate(
                name=str(spec["name"]),
                url=url,
                query=query,
                bound=_bound(spec, BOUND_KEYS, label, here),
                timeout_s=float(spec.get("timeout_s", 5.0)),
            )
        )
    _unique([g.name for g in gates], label, where)
    return tuple(gates)


def _unique(names: list[str], label: str, where: str) -> None:
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(
            f"gate name(s) {twice} used twice; give each gate its own `name`",
            source=label,
            key_path=where,
        )


def fill(query: str, model: str, version: str) -> str:
    """The query with its placeholders filled in."""
    values = {"model": model, "version": version}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], query)
