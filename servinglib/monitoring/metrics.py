"""Every Prometheus metric of servinglib, owned by one class and safe under gunicorn.

Under gunicorn each worker is a process, so metrics use prometheus_client's multiprocess
mode: the launcher sets ``PROMETHEUS_MULTIPROC_DIR`` before anything imports
prometheus_client, wipes it at start, and calls :func:`mark_worker_dead` when a worker
exits (see the prometheus_client "multiprocess" docs). Histograms, never Summaries, since
Summaries cannot be aggregated across processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from servinglib.registry import VersionState

__all__ = ["METRIC_SPECS", "MetricSpec", "ServingMetrics", "mark_worker_dead", "multiprocess_dir"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_LOAD_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True)
class MetricSpec:
    """Declaration of one metric; the reference docs are generated from these."""

    attr: str
    kind: str
    name: str
    documentation: str
    labels: tuple[str, ...]
    multiprocess_mode: str = ""


METRIC_SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "requests",
        "counter",
        "servinglib_requests_total",
        "Inference requests answered, by model, version, protocol and outcome "
        "(success, invalid_input, not_found, not_ready, too_large, model_error, server_error).",
        ("model", "version", "protocol", "outcome"),
    ),
    MetricSpec(
        "request_duration",
        "histogram",
        "servinglib_request_duration_seconds",
        "Wall time from request received to response ready, in seconds.",
        ("model", "version", "protocol"),
    ),
    MetricSpec(
        "in_flight",
        "gauge",
        "servinglib_requests_in_flight",
        "Requests being handled right now, summed over live workers.",
        ("protocol",),
        "livesum",
    ),
    MetricSpec(
        "load_duration",
        "histogram",
        "servinglib_model_load_duration_seconds",
        "Time Model.load() took for one version in one worker, in seconds.",
        ("model", "version"),
    ),
    MetricSpec(
        "selftest_duration",
        "histogram",
        "servinglib_model_self_test_duration_seconds",
        "Time the self-tests of one version took in one worker, in seconds.",
        ("model", "version"),
    ),
    MetricSpec(
        "selftest_passed",
        "gauge",
        "servinglib_model_self_test_passed",
        "1 when every self-test of the version passed in every live worker, else 0.",
        ("model", "version"),
        "livemin",
    ),
    MetricSpec(
        "model_state",
        "gauge",
        "servinglib_model_state",
        "1 for the lifecycle state a version is in (in at least one live worker).",
        ("model", "version", "state"),
        "livemax",
    ),
)


def multiprocess_dir() -> str | None:
    """The multiprocess metrics directory, when running under the servinglib launcher."""
    return os.environ.get(MULTIPROC_ENV) or None


def mark_worker_dead(pid: int) -> None:
    """Drop the live gauges of an exited worker (call from gunicorn's ``child_exit``)."""
    if multiprocess_dir():
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


class ServingMetrics:
    """Owns every metric; created once per process with an injected registry.

    It also listens to the registry's lifecycle events (it implements
    :class:`servinglib.registry.LifecycleListener`).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        factories: dict[str, Any] = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
        for spec in METRIC_SPECS:
            kwargs: dict[str, Any] = {"registry": self.registry}
            if spec.kind == "gauge":
                kwargs["multiprocess_mode"] = spec.multiprocess_mode or "livesum"
            if spec.kind == "histogram":
                kwargs["buckets"] = _LOAD_BUCKETS if "model_" in spec.name else _LATENCY_BUCKETS
            metric_name = spec.name.removesuffix("_total")
            setattr(
                self,
                spec.attr,
                factories[spec.kind](metric_name, spec.documentation, spec.labels, **kwargs),
            )

    def observe_request(
        self, model: str, version: str, protocol: str, outcome: str, seconds: float
    ) -> None:
        """Count one answered request and its latency."""
        self.requests.labels(model, version, protocol, outcome).inc()  # type: ignore[attr-defined]
        self.request_duration.labels(model, version, protocol).observe(seconds)  # type: ignore[attr-defined]

    def in_flight_gauge(self, protocol: str) -> Any:
        """The in-flight gauge child of ``protocol`` (use ``.inc()``/``.dec()``)."""
        return self.in_flight.labels(protocol)  # type: ignore[attr-defined]

    # LifecycleListener
    def version_state(self, model: str, version: str, state: VersionState) -> None:
        """Set the state gauge: 1 for ``state``, 0 for every other state."""
        for candidate in VersionState:
            value = 1 if candidate is state else 0
            self.model_state.labels(model, version, candidate.value).set(value)  # type: ignore[attr-defined]

    def version_loaded(self, model: str, version: str, duration_s: float) -> None:
        """Record how long ``load()`` took."""
        self.load_duration.labels(model, version).observe(duration_s)  # type: ignore[attr-defined]

    def version_self_tested(
        self, model: str, version: str, duration_s: float, passed: bool
    ) -> None:
        """Record self-test duration and result."""
        self.selftest_duration.labels(model, version).observe(duration_s)  # type: ignore[attr-defined]
        self.selftest_passed.labels(model, version).set(1 if passed else 0)  # type: ignore[attr-defined]

    def render(self) -> tuple[bytes, str]:
        """Prometheus text for ``/metrics``: all workers in multiprocess mode, else this one."""
        if multiprocess_dir():
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
