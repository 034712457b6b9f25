"""Per-version evidence read from the metrics every worker already writes.

A :class:`Snapshot` holds cumulative counters of one model, summed over all workers (the
multiprocess files, as ``/metrics`` shows them). Counters of a worker killed with ``-9``
stay in its files, so the sums never go down -- except after a master restart, which
wipes them: :meth:`Snapshot.minus` then reports ``None`` and the controller starts the
step's window again. A window is the difference of two snapshots, so baseline and
candidate are always compared over the same span of time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, multiprocess

from servinglib.monitoring.metrics import multiprocess_dir

__all__ = [
    "FAILED_OUTCOMES",
    "Counts",
    "Snapshot",
    "read_snapshots",
    "snapshot_from_samples",
]

# Outcomes that are the server's (or the model's) fault: the error-rate gate counts these.
# Client mistakes (invalid_input, not_found, too_large) and load shedding are not the
# candidate's doing.
FAILED_OUTCOMES = frozenset(
    {"model_error", "server_error", "nonfinite_output", "deadline_exceeded"}
)

_RAN = frozenset({"ok", "error", "timeout"})  # shadow outcomes where the model code ran

Sample = tuple[str, Mapping[str, str], float]


@dataclass
class Counts:
    """Cumulative counts of one version (or of one shadow pair)."""

    requests: int = 0
    failed: int = 0
    buckets: dict[float, float] = field(default_factory=dict)  # le -> cumulative count
    comparisons: int = 0
    agreements: int = 0
    # The model's own series (``self.metrics``): ``<name>_total``, ``<name>_sum``,
    # ``<name>_count``, ``<name>_bucket:<le>``, summed over extra labels and workers.
    metrics: dict[str, float] = field(default_factory=dict)

    def per_bucket(self, bounds: list[float]) -> list[float]:
        """Observations in each bucket (not cumulative), in ``bounds`` order."""
        previous, out = 0.0, []
        for bound in bounds:
            value = self.buckets.get(bound, previous)
            out.append(max(0.0, value - previous))
            previous = value
        return out

    def minus(self, earlier: Counts) -> Counts | None:
        """The counts since ``earlier``; None when a counter went down (a reset)."""
        if self.requests < earlier.requests or self.comparisons < earlier.comparisons:
            return None
        return Counts(
            self.requests - earlier.requests,
            self.failed - earlier.failed,
            {le: v - earlier.buckets.get(le, 0.0) for le, v in self.buckets.items()},
            self.comparisons - earlier.comparisons,
            self.agreements - earlier.agreements,
            {k: v - earlier.metrics.get(k, 0.0) for k, v in self.metrics.items()},
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (bucket bounds as strings: +Inf is not JSON)."""
        return {
            "requests": self.requests,
            "failed": self.failed,
            "buckets": {repr(le): v for le, v in self.buckets.items()},
            "comparisons": self.comparisons,
            "agreements": self.agreements,
            "metrics": self.metrics,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Counts:
        """The inverse of :meth:`to_json`."""
        buckets = {float(le): float(v) for le, v in raw.get("buckets", {}).items()}
        return cls(
            int(raw["requests"]),
            int(raw["failed"]),
            buckets,
            int(raw.get("comparisons", 0)),
            int(raw.get("agreements", 0)),
            {k: float(v) for k, v in raw.get("metrics", {}).items()},
        )


@dataclass
class Snapshot:
    """One model's cumulative counts at wall time ``t``: per version, and per shadow version
    (answers compared with the primary's)."""

    t: float
    versions: dict[str, Counts] = field(default_factory=dict)
    shadows: dict[str, Counts] = field(default_factory=dict)

    def version(self, name: str) -> Counts:
        """The counts of one version (zero when it answered nothing yet)."""
        return self.versions.get(name, Counts())

    def shadow(self, name: str) -> Counts:
        """The comparisons of shadow version ``name`` (zero when none yet)."""
        return self.shadows.get(name, Counts())

    def to_json(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "t": self.t,
            "versions": {v: c.to_json() for v, c in self.versions.items()},
            "shadows": {v: c.to_json() for v, c in self.shadows.items()},
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Snapshot:
        """The inverse of :meth:`to_json`."""
        return cls(
            float(raw["t"]),
            {v: Counts.from_json(c) for v, c in raw.get("versions", {}).items()},
            {v: Counts.from_json(c) for v, c in raw.get("shadows", {}).items()},
        )


def snapshot_from_samples(model: str, samples: Iterable[Sample], t: float) -> Snapshot:
    """Fold metric samples (summed over protocols and workers) into a snapshot."""
    snapshot = Snapshot(t)
    for name, labels, value in samples:
        if labels.get("model") != model:
            continue
        if name == "servinglib_requests_total":
            counts = snapshot.versions.setdefault(labels["version"], Counts())
            counts.requests += int(value)
            if labels.get("outcome") in FAILED_OUTCOMES:
                counts.failed += int(value)
        elif name == "servinglib_request_duration_seconds_bucket":
            counts = snapshot.versions.setdefault(labels["version"], Counts())
            le = float(labels["le"])
            counts.buckets[le] = counts.buckets.get(le, 0.0) + value
        elif name == "servinglib_shadow_comparisons_total":
            snapshot.shadows.setdefault(labels["shadow_version"], Counts()).comparisons += int(
                value
            )
        elif name == "servinglib_shadow_requests_total" and labels.get("outcome") in _RAN:
            # Copies the shadow version's model code ran: its own metrics count them too.
            snapshot.shadows.setdefault(labels["shadow_version"], Counts()).requests += int(value)
        elif name == "servinglib_shadow_agreements_total":
            snapshot.shadows.setdefault(labels["shadow_version"], Counts()).agreements += int(value)
        elif not name.startswith("servinglib_") and "version" in labels:
            key = f"{name}:{labels['le']}" if name.endswith("_bucket") else name
            metrics = snapshot.versions.setdefault(labels["version"], Counts()).metrics
            metrics[key] = metrics.get(key, 0.0) + value
    return snapshot


def read_snapshots(
    models: Sequence[str], registry: CollectorRegistry | None = None
) -> dict[str, Snapshot]:
    """The current snapshot of each of ``models``: every worker's files in multiprocess
    mode, read once for all of them (a read costs about 0.3 s of CPU per few thousand
    series on a busy machine: one read per model and tick would starve the workers)."""
    if registry is None:
        registry = CollectorRegistry()
        if multiprocess_dir():
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    samples = [
        (sample.name, sample.labels, sample.value)
        for metric in registry.collect()
        for sample in metric.samples
        if not math.isnan(sample.value)
    ]
    t = time.time()
    return {model: snapshot_from_samples(model, samples, t) for model in models}
