"""Measure on this machine: model size, single-request latency, batched throughput, CPU features.

Latency and throughput are taken the same way for every model compared: warm-up runs first
(not counted), then ``repeats`` rounds of ``iterations`` runs. The models take turns run by
run, so a burst of load from elsewhere on the machine hits all of them alike. Each round
gives a p50 and a p95 per model; the reported figure is the median over rounds, which a
single disturbed round cannot move. A throughput round runs batches until every model has
spent at least ``min_round_s`` on them (and at least ``iterations // 10`` batches): a round
of a few hundred microseconds measures the timer and the scheduler, not the model.

Example::

    stats = measure_latency({"fp32": fp32, "int8": int8}, feed, MeasureSettings(repeats=5))
    print(stats["int8"].p95_ms)
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servinglib.optimize._files import model_size_mb
from servinglib.optimize._session import Session
from servinglib.optimize.samples import Feed

__all__ = [
    "CpuInfo",
    "LatencyStats",
    "MeasureSettings",
    "ThroughputStats",
    "cpu_info",
    "measure_latency",
    "measure_throughput",
    "model_size_mb",
]

Clock = Callable[[], float]
_MAX_RUNS = 100_000  # a throughput round never runs more batches than this


@dataclass(frozen=True)
class MeasureSettings:
    """How long and how often to measure.

    Attributes:
        threads: intra-op threads of every session measured.
        warmup: runs before counting, per model.
        iterations: runs per round for latency (batches per round for throughput).
        repeats: rounds; figures are the median over rounds.
        batch_size: batch size of the throughput measurement.
        min_round_s: least time each model spends in one throughput round.
    """

    threads: int = 1
    warmup: int = 20
    iterations: int = 100
    repeats: int = 5
    batch_size: int = 32
    min_round_s: float = 0.2


@dataclass(frozen=True)
class LatencyStats:
    """Single-request latency: the median over rounds of each round's p50 and p95."""

    p50_ms: float
    p95_ms: float
    rounds_p50_ms: tuple[float, ...]
    rounds_p95_ms: tuple[float, ...]


@dataclass(frozen=True)
class ThroughputStats:
    """Samples per second at ``batch_size``: the median over rounds."""

    batch_size: int
    samples_per_s: float
    rounds_samples_per_s: tuple[float, ...]


@dataclass(frozen=True)
class CpuInfo:
    """The CPU measured on, and the instruction sets that decide INT8 speed."""

    model: str
    logical_cores: int
    avx2: bool
    avx512f: bool
    avx512_vnni: bool
    avx_vnni: bool
    amx_int8: bool

    @property
    def vnni(self) -> bool:
        """True when u8xs8 dot products run on VNNI (fast, and no 16-bit saturation)."""
        return self.avx512_vnni or self.avx_vnni


def cpu_info(cpuinfo: str | None = None) -> CpuInfo:
    """CPU model and INT8-relevant flags, from ``/proc/cpuinfo`` (or the text given)."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    model, flags = platform.processor() or platform.machine(), set[str]()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name":
            model = value.strip()
        elif key == "flags":
            flags = set(value.split())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return CpuInfo(
        model=model or "unknown",
        logical_cores=cores or 1,
        avx2="avx2" in flags,
        avx512f="avx512f" in flags,
        avx512_vnni="avx512_vnni" in flags,
        avx_vnni="avx_vnni" in flags,
        amx_int8="amx_int8" in flags,
    )


def _percentiles(samples: list[float]) -> tuple[float, float]:
    p50, p95 = np.percentile(np.array(samples) * 1e3, [50, 95])
    return float(p50), float(p95)


def measure_latency(
    sessions: Mapping[str, Session],
    feed: Feed,
    settings: MeasureSettings,
    clock: Clock = time.perf_counter,
) -> dict[str, LatencyStats]:
    """Single-request latency of each session on ``feed``, the sessions taking turns."""
    for session in sessions.values():
        for _ in range(settings.warmup):
            session.run(feed)
    rounds: dict[str, list[tuple[float, float]]] = {name: [] for name in sessions}
    for _ in range(max(1, settings.repeats)):
        times: dict[str, list[float]] = {name: [] for name in sessions}
        for _ in range(max(1, settings.iterations)):
            for name, session in sessions.items():
                start = clock()
                session.run(feed)
                times[name].append(clock() - start)
        for name, samples in times.items():
            rounds[name].append(_percentiles(samples))
    return {
        name: LatencyStats(
            p50_ms=float(np.median([r[0] for r in results])),
            p95_ms=float(np.median([r[1] for r in results])),
            rounds_p50_ms=tuple(r[0] for r in results),
            rounds_p95_ms=tuple(r[1] for r in results),
        )
        for name, results in rounds.items()
    }


def measure_throughput(
    sessions: Mapping[str, Session],
    batch: Feed,
    settings: MeasureSettings,
    clock: Clock = time.perf_counter,
) -> dict[str, ThroughputStats]:
    """Samples per second of each session on the stacked ``batch``, the sessions taking turns."""
    size = len(next(iter(batch.values())))
    for session in sessions.values():
        for _ in range(max(1, settings.warmup // 4)):
            session.run(batch)
    rounds: dict[str, list[float]] = {name: [] for name in sessions}
    least = max(1, settings.iterations // 10)
    for _ in range(max(1, settings.repeats)):
        elapsed = dict.fromkeys(sessions, 0.0)
        runs = 0
        while runs < least or (min(elapsed.values()) < settings.min_round_s and runs < _MAX_RUNS):
            for name, session in sessions.items():
                start = clock()
                session.run(batch)
                elapsed[name] += clock() - start
            runs += 1
        for name, seconds in elapsed.items():
            rounds[name].append(size * runs / max(seconds, 1e-12))
    return {
        name: ThroughputStats(size, float(np.median(values)), tuple(values))
        for name, values in rounds.items()
    }
