"""Readings the custom gates need beyond the metric counters: the drift monitor's window
and Prometheus queries, taken in the master at each evaluation.

The drift reports come from the same per-worker count tables the workers' own
``/models/<m>/versions/<v>/drift`` sums (the master only reads them); a query goes to the
Prometheus HTTP API (``GET <url>/api/v1/query?query=...``) once for the baseline and once
for the candidate. Any failure is recorded as an ``error`` (the gate reads it as
unknown), never raised.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servinglib.config.rollout_gates import QueryGate, fill
from servinglib.config.rollout_policy import RolloutPolicy
from servinglib.config.spec import ServiceConfig
from servinglib.monitoring.drift import DriftMonitor
from servinglib.monitoring.metrics import multiprocess_dir

__all__ = ["ExternalReadings", "query_pair", "query_prometheus"]


@dataclass(frozen=True)
class _Record:
    version: str
    path: Path


class ExternalReadings:
    """Takes the drift and query readings of one evaluation (see
    :mod:`servinglib.delivery.custom_gates` for their shape)."""

    def __init__(self, config: ServiceConfig) -> None:
        self._repositories = {m.name: m.repository for m in config.models}
        self._drift: DriftMonitor | None = None

    # --- VersionDirectories, for the drift monitor ---
    def model_names(self) -> list[str]:
        """Every configured model."""
        return list(self._repositories)

    def records(self, model: str) -> list[_Record]:
        """The version directories of ``model``."""
        root = self._repositories[model]
        if not root.is_dir():
            return []
        return [_Record(p.name, p) for p in sorted(root.iterdir()) if p.is_dir()]

    def __call__(
        self, policy: RolloutPolicy, model: str, baseline: str, candidate: str
    ) -> dict[str, Any]:
        """The readings ``policy``'s gates need now."""
        readings: dict[str, Any] = {}
        if policy.drift is not None:
            try:
                readings["drift"] = {
                    "baseline": self._fields(model, baseline),
                    "candidate": self._fields(model, candidate),
                }
            except (OSError, ValueError) as e:  # an unreadable count table: unknown, not a crash
                readings["drift"] = {"baseline": None, "candidate": None, "error": repr(e)}
        if policy.queries:
            readings["queries"] = {
                q.name: query_pair(q, model, baseline, candidate) for q in policy.queries
            }
        return readings

    def _fields(self, model: str, version: str) -> dict[str, Any] | None:
        if self._drift is None:
            self._drift = DriftMonitor(self, multiprocess_dir())
        report = self._drift.report(model, version)
        if report is None:
            return None
        return {
            f["name"]: {
                "role": f["role"],
                "reference": f["bins"]["reference"],
                "live": f["bins"]["live"],
            }
            for f in report["fields"]
        }


def query_pair(gate: QueryGate, model: str, baseline: str, candidate: str) -> dict[str, Any]:
    """The query's value for the baseline and the candidate, or the first error."""
    reading: dict[str, Any] = {"baseline": None, "candidate": None, "error": None}
    for role, version in (("baseline", baseline), ("candidate", candidate)):
        try:
            reading[role] = query_prometheus(
                gate.url, fill(gate.query, model, version), gate.timeout_s
            )
        except (OSError, ValueError, KeyError, TypeError) as e:
            reading["error"] = f"{gate.url}: {e}"
            break
    return reading


def query_prometheus(url: str, query: str, timeout_s: float) -> float | None:
    """The value of an instant ``query`` (None: no series; the sum when several).

    Raises:
        OSError: the server is unreachable or answered an HTTP error.
        ValueError: the answer is not a successful vector or scalar result.
    """
    address = f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    try:
        with urllib.request.urlopen(address, timeout=timeout_s) as answer:  # noqa: S310
            body = json.loads(answer.read())
    except urllib.error.HTTPError as e:
        detail = e.read()[:300].decode("utf-8", "replace")
        raise OSError(f"HTTP {e.code} for query {query!r}: {detail}") from e
    if body.get("status") != "success":
        raise ValueError(f"query {query!r}: {body.get('error', body)}")
    data = body["data"]
    if data["resultType"] == "scalar":
        value = float(data["result"][1])
        return None if math.isnan(value) else value
    if data["resultType"] != "vector":
        raise ValueError(f"query {query!r} returned a {data['resultType']}; give an instant vector")
    values = [float(series["value"][1]) for series in data["result"]]
    values = [v for v in values if not math.isnan(v)]  # 0/0 in PromQL: no evidence either
    return sum(values) if values else None
