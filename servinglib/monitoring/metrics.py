"""Every Prometheus metric of servinglib, owned by one class and safe under gunicorn.

Under gunicorn each worker is a process, so metrics use prometheus_client's multiprocess
mode: the launcher sets ``PROMETHEUS_MULTIPROC_DIR`` before anything imports
prometheus_client, wipes it at start, and calls :func:`mark_worker_dead` when a worker
exits (see the prometheus_client "multiprocess" docs). Histograms, never Summaries, since
Summaries cannot be aggregated across processes.
"""

from __future__ import annotations

import math
import os
import threading
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
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from servinglib.config.spec import ServiceConfig
from servinglib.lifecycle.registry import VersionState
from servinglib.monitoring.exemplars import ExemplarStore, remove_worker, with_exemplars
from servinglib.monitoring.metric_specs import METRIC_SPECS, REQUEST_BUCKETS, MetricSpec
from servinglib.shadow.comparators import Comparison

__all__ = [
    "METRIC_SPECS",
    "MetricSpec",
    "ServingMetrics",
    "mark_worker_dead",
    "multiprocess_dir",
]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
SHADOW_OUTCOMES = ("ok", "error", "timeout", "refused", "not_ready")
_LATENCY = "servinglib_request_duration_seconds"
_LATENCY_BOUNDS = (*REQUEST_BUCKETS, math.inf)

# prometheus_client's multiprocess values share one lock. A gunicorn worker forked while a
# master thread (the rollout controller, the admin API) held it would start with it held
# and hang at its first metric; the master's writes hold this guard, and fork waits for it.
_FORK_GUARD = threading.Lock()
os.register_at_fork(
    before=_FORK_GUARD.acquire,
    after_in_parent=_FORK_GUARD.release,
    after_in_child=_FORK_GUARD.release,
)


def multiprocess_dir() -> str | None:
    """The multiprocess metrics directory, when running under the servinglib launcher."""
    return os.environ.get(MULTIPROC_ENV) or None


def mark_worker_dead(pid: int) -> None:
    """Drop the live gauges of an exited worker (call from gunicorn's ``child_exit``)."""
    directory = multiprocess_dir()
    if directory:
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
        remove_worker(directory, pid)


class ServingMetrics:
    """Owns every metric; created once per process with an injected registry.

    It also listens to the registry's lifecycle events (it implements
    :class:`servinglib.lifecycle.registry.LifecycleListener`).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._children: dict[tuple[str, ...], Any] = {}
        self._collectors: list[Collector] = []
        self._exemplars = ExemplarStore(multiprocess_dir)
        factories: dict[str, Any] = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
        for spec in METRIC_SPECS:
            kwargs: dict[str, Any] = {"registry": self.registry}
            if spec.kind == "gauge":
                kwargs["multiprocess_mode"] = spec.multiprocess_mode or "livesum"
            if spec.kind == "histogram":
                kwargs["buckets"] = spec.buckets
            metric_name = spec.name.removesuffix("_total")
            setattr(
                self,
                spec.attr,
                factories[spec.kind](metric_name, spec.documentation, spec.labels, **kwargs),
            )

    def observe_request(
        self,
        model: str,
        version: str,
        protocol: str,
        outcome: str,
        seconds: float,
        trace_id: str = "",
    ) -> None:
        """Count one answered request and its latency; a sampled request's ``trace_id``
        becomes the exemplar of its latency bucket."""
        self._child("requests", model, version, protocol, outcome).inc()
        self._child("request_duration", model, version, protocol).observe(seconds)
        if trace_id:
            labels = {"model": model, "version": version, "protocol": protocol}
            self._exemplars.record(_LATENCY, labels, _LATENCY_BOUNDS, seconds, trace_id)

    def add_collector(self, collector: Collector) -> None:
        """Export metrics computed at scrape time (drift scores) alongside these."""
        self.registry.register(collector)
        self._collectors.append(collector)

    def data_quality_issue(
        self, model: str, version: str, field: str, issue: str, count: int = 1
    ) -> None:
        """Count data-quality problems of a profiled field."""
        self._child("data_quality_issues", model, version, field, issue).inc(count)

    def in_flight_gauge(self, protocol: str) -> Any:
        """The in-flight gauge child of ``protocol`` (use ``.inc()``/``.dec()``)."""
        return self._child("in_flight", protocol)

    def _child(self, attr: str, *labels: str) -> Any:
        """The labelled child of a metric, cached: ``labels()`` locks and validates each call."""
        key = (attr, *labels)
        child = self._children.get(key)
        if child is None:
            child = getattr(self, attr).labels(*labels)
            self._children[key] = child  # a benign race: both threads get the same child
        return child

    # LifecycleListener
    def version_state(self, model: str, version: str, state: VersionState) -> None:
        """Set the state gauge: 1 for ``state``, 0 for every other state."""
        for candidate in VersionState:
            value = 1 if candidate is state else 0
            self._child("model_state", model, version, candidate.value).set(value)

    def version_loaded(self, model: str, version: str, duration_s: float) -> None:
        """Record how long ``load()`` took."""
        self._child("load_duration", model, version).observe(duration_s)

    def version_self_tested(
        self, model: str, version: str, duration_s: float, passed: bool
    ) -> None:
        """Record self-test duration and result."""
        self._child("selftest_duration", model, version).observe(duration_s)
        self._child("selftest_passed", model, version).set(1 if passed else 0)

    # RejectionListener
    def input_rejected(self, model: str, field: str) -> None:
        """Count an input that failed validation."""
        self._child("input_rejected_total", model, field).inc()

    def declare_shadow_pairs(self, config: ServiceConfig) -> None:
        """Start every shadow counter at 0 for every configured shadow pair.

        A counter child appears only once a label set is used; without this, "nothing
        dropped" or "never agreed" would be an absent series, which dashboards and alerts
        (the agreement ratio of ``ServinglibShadowDisagreement``) cannot tell from "not
        scraped". Primaries: the default version and every version with traffic.
        """
        for model in config.models:
            primaries = {model.default_version, *(model.traffic or {})}
            for shadow in model.shadows:
                for primary in sorted(primaries - {shadow.version}):
                    self._declare_pair(model.name, primary, shadow.version)
                    if config.shadow_executor.max_cpu_share is not None:
                        self._child("shadow_shed_total", model.name, primary, shadow.version)

    def _declare_pair(self, model: str, primary: str, shadow: str) -> None:
        for attr in ("shadow_dropped_total", "shadow_comparisons", "shadow_agreements"):
            self._child(attr, model, primary, shadow)
        for outcome in SHADOW_OUTCOMES:
            self._child("shadow_requests", model, primary, shadow, outcome)

    # ShadowListener
    def shadow_dropped(self, model: str, primary: str, shadow: str) -> None:
        """Count a shadow copy dropped because the executor was full."""
        self._child("shadow_dropped_total", model, primary, shadow).inc()

    def shadow_shed(self, model: str, primary: str, shadow: str) -> None:
        """Count a shadow copy shed because the shadows' CPU budget was spent."""
        self._child("shadow_shed_total", model, primary, shadow).inc()

    def shadow_finished(
        self, model: str, primary: str, shadow: str, outcome: str, seconds: float
    ) -> None:
        """Count a shadow copy that ran, and its latency."""
        self._child("shadow_requests", model, primary, shadow, outcome).inc()
        self._child("shadow_latency", model, primary, shadow).observe(seconds)

    def shadow_compared(
        self, model: str, primary: str, shadow: str, comparison: Comparison
    ) -> None:
        """Count a comparison, an agreement, and observe the difference."""
        self._child("shadow_comparisons", model, primary, shadow).inc()
        agreements = self._child("shadow_agreements", model, primary, shadow)  # 0 if none agree
        if comparison.agree:
            agreements.inc()
        if comparison.difference is not None and math.isfinite(comparison.difference):
            self._child("shadow_difference", model, primary, shadow).observe(comparison.difference)

    # BatchListener
    def batch_executed(self, model: str, version: str, size: int) -> None:
        """Observe the size of a batch that ran."""
        self._child("batch_size", model, version).observe(size)

    def request_queued(self, model: str, version: str, seconds: float) -> None:
        """Observe how long a request queued."""
        self._child("queue_time", model, version).observe(seconds)

    def queue_depth(self, model: str, version: str, depth: int) -> None:
        """Set the current queue depth."""
        self._child("queue_depth_gauge", model, version).set(depth)

    # StepListener
    def step_finished(self, model: str, version: str, step: str, seconds: float, ok: bool) -> None:
        """Observe one step of a composed model; count it when it failed."""
        self._child("step_duration", model, version, step).observe(seconds)
        if not ok:
            self._child("step_errors", model, version, step).inc()

    def call_lost(self, model: str, version: str) -> None:
        """Count a call the watchdog gave up on."""
        self._child("lost_calls", model, version).inc()

    def resident_memory_bytes(self, rss: int) -> None:
        """Set this worker's resident memory."""
        self.__dict__["resident_memory"].set(rss)  # declared in METRIC_SPECS, set by name

    # prediction log
    def prediction_log_dropped(self, count: int) -> None:
        """Count prediction-log records that could not be kept."""
        self._child("prediction_log_records", "dropped").inc(count)

    def prediction_log_truncated(self, count: int) -> None:
        """Count records kept with summarized features or output (over max_record_bytes)."""
        self._child("prediction_log_records", "truncated").inc(count)

    def prediction_log_written(self, count: int) -> None:
        """Count prediction-log records written."""
        self._child("prediction_log_records", "written").inc(count)

    def rollout_decided(self, model: str, candidate: str, action: str, step: int) -> None:
        """Count one rollout decision and publish the rollout's step (in the master: under
        the fork guard)."""
        with _FORK_GUARD:
            self._child("rollout_decisions", model, candidate, action).inc()
            self._child("rollout_step", model, candidate).set(step)

    # prediction sinks (a SinkListener)
    def sink_records(self, sink: str, outcome: str, count: int) -> None:
        """Count a sink's records written, spooled, replayed or truncated."""
        self._child("prediction_sink_records", sink, outcome).inc(count)

    def sink_dropped(self, sink: str, reason: str, count: int) -> None:
        """Count a sink's lost records by reason."""
        self._child("prediction_sink_dropped", sink, reason).inc(count)

    def sink_spool(self, sink: str, spool_bytes: int, lag_s: float) -> None:
        """Set a sink's spool size and lag."""
        self._child("prediction_sink_spool_bytes", sink).set(spool_bytes)
        self._child("prediction_sink_lag", sink).set(lag_s)

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """``/metrics``: all workers in multiprocess mode, else this one; OpenMetrics with
        the latency exemplars when ``accept`` (the request's Accept header) asks for it,
        else the Prometheus text format."""
        if "application/openmetrics-text" in accept:
            encode, content_type = choose_encoder(accept)
            if content_type.startswith("application/openmetrics-text"):
                return encode(_Exemplified(self._scraped(), self._exemplars)), content_type
        return generate_latest(self._scraped()), CONTENT_TYPE_LATEST

    def samples(self, *names: str) -> list[tuple[str, dict[str, str], float]]:
        """``(sample name, labels, value)`` of the metrics ``names`` (e.g.
        ``"servinglib_requests"``), summed over all workers as ``/metrics`` shows them."""
        wanted = set(names)
        registry = self.registry
        if multiprocess_dir():  # the counters only: drift scores are not computed for this
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return [
            (sample.name, sample.labels, sample.value)
            for metric in registry.collect()
            if metric.name in wanted
            for sample in metric.samples
        ]

    def _scraped(self) -> CollectorRegistry:
        """What a scrape reads: every worker's files in multiprocess mode, else this one."""
        if not multiprocess_dir():
            return self.registry
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        for collector in self._collectors:
            registry.register(collector)
        return registry


class _Exemplified:
    """A registry's metrics with the latency exemplars merged in (OpenMetrics only)."""

    def __init__(self, registry: CollectorRegistry, exemplars: ExemplarStore) -> None:
        self._registry = registry
        self._exemplars = exemplars

    def collect(self) -> Any:
        return with_exemplars(self._registry.collect(), self._exemplars.merged())
