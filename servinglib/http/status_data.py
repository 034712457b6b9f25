"""What ``/status`` shows, gathered from the service and the worker-aggregated metrics.

Rates, error ratios and p95 latency come from differences of the cumulative counters
(summed over every worker) between samples this worker keeps while the page is viewed:
one sample per view, at most one every ``MIN_SAMPLE_S``, kept for ``HISTORY_S``. Nothing
here is secret: failure reasons are the catalog's public ones (no server paths), and no
path, URL or token of the config is shown.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from servinglib.monitoring.metrics import ServingMetrics
from servinglib.serving.service import InferenceService

__all__ = ["StatusHistory", "gather_status"]

HISTORY_S = 600.0
MIN_SAMPLE_S = 1.0
RECENT_S = 60.0

Key = tuple[str, str]  # (model, version)


@dataclass
class _Totals:
    requests: float = 0.0
    errors: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)  # upper bound (s) -> count


@dataclass
class _Sample:
    at: float
    totals: dict[Key, _Totals]
    drift: dict[Key, float]


def _read_totals(metrics: ServingMetrics) -> dict[Key, _Totals]:
    totals: dict[Key, _Totals] = {}
    wanted = ("servinglib_requests", "servinglib_request_duration_seconds")
    for name, labels, value in metrics.samples(*wanted):
        key = (labels.get("model", ""), labels.get("version", ""))
        if not key[0] or not key[1]:
            continue
        entry = totals.setdefault(key, _Totals())
        if name == "servinglib_requests_total":
            entry.requests += value
            if labels.get("outcome") != "success":
                entry.errors += value
        elif name == "servinglib_request_duration_seconds_bucket":
            bound = float(labels["le"])
            entry.buckets[bound] = entry.buckets.get(bound, 0.0) + value
    return totals


def _quantile(buckets: Mapping[float, float], q: float) -> float | None:
    """The ``q`` quantile (seconds) of cumulative histogram buckets, interpolated."""
    bounds = sorted(buckets)
    total = buckets.get(math.inf, 0.0)
    if total <= 0:
        return None
    rank, low, below = q * total, 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return low
            share = (rank - below) / (count - below) if count > below else 1.0
            return low + (bound - low) * share
        low, below = bound, count
    return low


class StatusHistory:
    """This worker's recent samples of the counters and drift scores."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._samples: deque[_Sample] = deque()
        self._lock = threading.Lock()

    def sample(self, metrics: ServingMetrics, drift: dict[Key, float]) -> list[_Sample]:
        """Take a sample (unless the last is under ``MIN_SAMPLE_S`` old); return them all."""
        now = self._clock()
        with self._lock:
            if not self._samples or now - self._samples[-1].at >= MIN_SAMPLE_S:
                self._samples.append(_Sample(now, _read_totals(metrics), drift))
            while self._samples and now - self._samples[0].at > HISTORY_S:
                self._samples.popleft()
            return list(self._samples)


def _recent(samples: list[_Sample], key: Key) -> dict[str, Any]:
    last = samples[-1]
    base = next((s for s in samples if last.at - s.at <= RECENT_S), samples[0])
    now, then = last.totals.get(key, _Totals()), base.totals.get(key, _Totals())
    seconds = last.at - base.at
    requests = now.requests - then.requests
    errors = now.errors - then.errors
    buckets = {b: c - then.buckets.get(b, 0.0) for b, c in now.buckets.items()}
    p95 = _quantile(buckets, 0.95)
    rates = []
    for earlier, later in itertools.pairwise(samples):
        span = later.at - earlier.at
        done = (
            later.totals.get(key, _Totals()).requests - earlier.totals.get(key, _Totals()).requests
        )
        rates.append(done / span if span > 0 else 0.0)
    return {
        "window_s": round(seconds, 1),
        "requests": int(requests),
        "rate_per_s": requests / seconds if seconds > 0 else None,
        "error_ratio": errors / requests if requests else None,
        "p95_ms": None if p95 is None else p95 * 1000,
        "rate_trend": rates[-30:],
        "total_requests": int(now.requests),
    }


def _drift_scores(service: InferenceService) -> dict[Key, float]:
    scores: dict[Key, float] = {}
    catalog = service.catalog
    for name in catalog.model_names():
        for view in catalog.views(name):
            if not view.ready:
                continue
            report = service.drift_report(name, view.version)
            values = [f["psi"] for f in (report or {}).get("fields", []) if f["psi"] is not None]
            if values:
                scores[(name, view.version)] = max(values)
    return scores


def _shadows(metrics: ServingMetrics) -> dict[tuple[str, str, str], list[float]]:
    found: dict[tuple[str, str, str], list[float]] = {}
    names = ("servinglib_shadow_comparisons", "servinglib_shadow_agreements")
    for name, labels, value in metrics.samples(*names):
        if not name.endswith("_total"):  # _created, outside multiprocess mode
            continue
        key = (labels["model"], labels["primary_version"], labels["shadow_version"])
        pair = found.setdefault(key, [0.0, 0.0])
        pair[0 if name.startswith("servinglib_shadow_comparisons") else 1] += value
    return found


def gather_status(
    service: InferenceService, metrics: ServingMetrics, history: StatusHistory
) -> dict[str, Any]:
    """The page's data, JSON-ready."""
    drift = _drift_scores(service)
    samples = history.sample(metrics, drift)
    shadows = _shadows(metrics)
    catalog = service.catalog
    config = catalog.config
    entries = {m.name: m for m in config.models}
    models = []
    for name in catalog.model_names():
        entry = entries.get(name)
        versions = []
        for view in catalog.views(name):
            key = (name, view.version)
            versions.append(
                {
                    "version": view.version,
                    "state": view.state,
                    "reason": view.reason,  # public: no server paths
                    "self_test": {"passed": view.self_tests[0], "cases": view.self_tests[1]},
                    "traffic": _recent(samples, key),
                    "drift_psi": drift.get(key),
                    "drift_trend": [s.drift[key] for s in samples if key in s.drift][-30:],
                }
            )
        split = dict(entry.traffic) if entry is not None and entry.traffic else {}
        models.append(
            {
                "name": name,
                "default_version": catalog.default_version(name),
                "traffic_split": split,
                "shadows": [
                    {
                        "primary_version": primary,
                        "shadow_version": shadow,
                        "comparisons": int(counts[0]),
                        "agreement": counts[1] / counts[0] if counts[0] else None,
                    }
                    for (model, primary, shadow), counts in sorted(shadows.items())
                    if model == name
                ],
                "versions": versions,
            }
        )
    return {"service": config.service, "models": models}
