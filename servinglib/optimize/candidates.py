"""Compressed candidates (pruned at several ratios) judged and timed against the original.

Every candidate's ONNX model is scored on the validation inputs with the metric of
``optimize run`` against the original's ONNX outputs (or the labels), then all of them are
timed together with the original, run by run in turns (:mod:`.measure`), so a burst of load
hits every model alike; speed-ups are claimed only when the rounds separate
(:func:`.compare.speed_claim`). The choice is the smallest model (fewest MACs) within every
budget; when none is, every candidate is listed with why it failed.

Example::

    scored = measure_candidates(found, valid, labels, reference, "accuracy", MeasureSettings())
    chosen, failures = choose_smallest(scored, max_loss=0.01)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from servinglib.optimize._session import open_session
from servinglib.optimize.accuracy import evaluate
from servinglib.optimize.compare import SpeedClaim, speed_claim
from servinglib.optimize.measure import (
    LatencyStats,
    MeasureSettings,
    ThroughputStats,
    measure_latency,
    measure_throughput,
)

__all__ = ["Candidate", "choose_smallest", "evaluate_onnx", "measure_candidates"]


@dataclass(frozen=True)
class Candidate:
    """One model of the curve (``ratio`` 0 is the original) and what was measured of it."""

    ratio: float
    path: Path
    params: int
    macs: int
    size_mb: float
    value: float | None = None
    loss: float | None = None
    latency: LatencyStats | None = None
    throughput: ThroughputStats | None = None
    p50_claim: SpeedClaim | None = None
    throughput_claim: SpeedClaim | None = None

    def describe(self) -> str:
        """One line: ratio, parameters, MACs, size, p50, loss."""
        p50 = f"{self.latency.p50_ms:.3f} ms" if self.latency else "?"
        loss = f"{self.loss:+.4f}" if self.loss is not None else "?"
        return (
            f"ratio {self.ratio:.0%}: {self.params:,} params, {self.macs:,} MACs, "
            f"{self.size_mb:.3f} MB, p50 {p50}, loss {loss}"
        )


def evaluate_onnx(path: Path, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """The model's first output on every validation sample (one run, the whole set)."""
    session = open_session(path)
    first: np.ndarray = session.raw.run(None, dict(inputs))[0]
    return first


def _per_sample(outputs: np.ndarray) -> list[np.ndarray]:
    return [outputs[i : i + 1] for i in range(len(outputs))]


def measure_candidates(
    found: Sequence[Candidate],
    valid: Mapping[str, np.ndarray],
    labels: np.ndarray | None,
    reference: np.ndarray,
    metric: str,
    settings: MeasureSettings,
    technique: str = "pruned",
) -> list[Candidate]:
    """Score each candidate, then time all of them interleaved with the original (first).

    ``technique`` names the candidates in the speed claims' reasons.
    """
    scored = []
    for candidate in found:
        result = evaluate(
            metric,
            reference=_per_sample(reference),
            candidate=_per_sample(evaluate_onnx(candidate.path, valid)),
            labels=labels,
        )
        scored.append(replace(candidate, value=result.value, loss=result.loss))
    sessions = {
        str(i): open_session(c.path, threads=settings.threads) for i, c in enumerate(scored)
    }
    count = len(next(iter(valid.values())))
    single = {name: array[count // 2 : count // 2 + 1] for name, array in valid.items()}
    rows = np.arange(settings.batch_size) % count
    batch = {name: array[rows] for name, array in valid.items()}
    latency = measure_latency(sessions, single, settings)
    throughput = measure_throughput(sessions, batch, settings)
    base_latency, base_throughput = latency["0"], throughput["0"]
    measured = []
    for i, candidate in enumerate(scored):
        lat, thr = latency[str(i)], throughput[str(i)]
        measured.append(
            replace(
                candidate,
                latency=lat,
                throughput=thr,
                p50_claim=speed_claim(
                    "p50", base_latency.rounds_p50_ms, lat.rounds_p50_ms, technique=technique
                )
                if i
                else None,
                throughput_claim=speed_claim(
                    f"throughput (batch {thr.batch_size})",
                    [1 / v for v in base_throughput.rounds_samples_per_s],
                    [1 / v for v in thr.rounds_samples_per_s],
                    technique=technique,
                )
                if i
                else None,
            )
        )
    return measured


def choose_smallest(
    candidates: Sequence[Candidate],
    max_loss: float,
    max_size_mb: float | None = None,
    max_latency_ms: float | None = None,
) -> tuple[Candidate | None, list[str]]:
    """The compressed candidate with fewest MACs within every budget, or every reason not."""
    fitting, reasons = [], []
    for c in candidates[1:]:
        why = []
        if c.loss is None or c.loss > max_loss:
            why.append(f"loss {c.loss:.4f} > {max_loss:g}" if c.loss is not None else "no loss")
        if max_size_mb is not None and c.size_mb > max_size_mb:
            why.append(f"size {c.size_mb:.3f} MB > {max_size_mb:g} MB")
        if max_latency_ms is not None and (c.latency is None or c.latency.p50_ms > max_latency_ms):
            why.append(f"p50 > {max_latency_ms:g} ms")
        if why:
            reasons.append(f"  {c.describe()}: {'; '.join(why)}")
        else:
            fitting.append(c)
    if fitting:
        return min(fitting, key=lambda c: (c.macs, c.loss or 0.0)), []
    return None, ["no candidate meets the budgets:", *reasons]
