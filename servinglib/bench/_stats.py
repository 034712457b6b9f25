"""Summaries of measured windows: percentiles, throughput, errors, and the spread of rounds."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from servinglib.bench._load import Samples

__all__ = ["combine_rounds", "summarise"]

_KEYS = ("throughput_rps", "p50_ms", "p95_ms", "p99_ms", "mean_ms")


def summarise(samples: Samples) -> dict[str, Any]:
    """One window: throughput of successful answers, latency percentiles of every answer,
    non-2xx statuses counted (0: could not connect; 1000 + n: gRPC status n)."""
    latencies = np.asarray(samples.latencies_s) * 1000.0
    ok = sum(1 for s in samples.statuses if 200 <= s < 300)
    errors = Counter(str(s) for s in samples.statuses if not 200 <= s < 300)
    if latencies.size:
        p50, p95, p99 = np.percentile(latencies, [50, 95, 99])
        mean = float(latencies.mean())
        curve = np.percentile(latencies, np.arange(0, 101)).round(4).tolist()
    else:
        p50 = p95 = p99 = mean = float("nan")
        curve = []
    return {
        "requests": int(latencies.size),
        "ok": ok,
        "seconds": round(samples.seconds, 4),
        "throughput_rps": ok / samples.seconds if samples.seconds else 0.0,
        "p50_ms": float(p50),
        "p95_ms": float(p95),
        "p99_ms": float(p99),
        "mean_ms": mean,
        "errors": dict(sorted(errors.items())),
        "percentiles_ms": curve,
    }


def combine_rounds(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure over the rounds, and its [min, max] as the spread."""
    median = {key: statistics.median(r[key] for r in rounds) for key in _KEYS}
    spread = {key: [min(r[key] for r in rounds), max(r[key] for r in rounds)] for key in _KEYS}
    errors: Counter[str] = Counter()
    for r in rounds:
        errors.update(r["errors"])
    median["requests"] = sum(r["requests"] for r in rounds)
    median["errors"] = dict(sorted(errors.items()))
    return {"median": median, "spread": spread}
