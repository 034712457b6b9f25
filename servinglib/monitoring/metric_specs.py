"""Every metric servinglib exports, declared once: name, type, help text, labels, buckets.

:class:`~servinglib.monitoring.metrics.ServingMetrics` creates them from this table, and the
metrics reference (``docs/reference/metrics.md``) is generated from it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["METRIC_SPECS", "REQUEST_BUCKETS", "MetricSpec"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# The request latency: the same bounds and more between them (no two more than 1.5x
# apart), so that a rollout's latency gate sees a 1.5x slowdown move the quantile across
# a bucket bound (docs/explanation/progressive-delivery.md).
REQUEST_BUCKETS = tuple(
    sorted(
        {
            *_LATENCY_BUCKETS,
            *(round(m * 10.0**e, 6) for e in range(-3, 1) for m in (1.5, 2, 3.5, 7)),
        }
    )
)
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
    buckets: tuple[float, ...] = ()


_SHADOW_LABELS = ("model", "primary_version", "shadow_version")
_DIFFERENCE_BUCKETS = (
    0.0,
    1e-6,
    1e-5,
    1e-4,
    1e-3,
    0.01,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    5.0,
    10.0,
    100.0,
)

METRIC_SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "step_duration",
        "histogram",
        "servinglib_step_duration_seconds",
        "Time one step (pipeline step or ensemble member) of a composed model took, in "
        "seconds, through the called model's own lane (its batcher and queue included).",
        ("model", "version", "step"),
        buckets=_LATENCY_BUCKETS,
    ),
    MetricSpec(
        "step_errors",
        "counter",
        "servinglib_step_errors_total",
        "Steps of a composed model that failed or could not start in the remaining deadline; "
        "an ensemble answering from the rest counts its failed members here.",
        ("model", "version", "step"),
    ),
    MetricSpec(
        "lost_calls",
        "counter",
        "servinglib_lost_calls_total",
        "Model calls that outlived their deadline by server.watchdog_margin_s; each holds "
        "a thread of its version until it returns.",
        ("model", "version"),
    ),
    MetricSpec(
        "resident_memory",
        "gauge",
        "servinglib_worker_resident_memory_bytes",
        "Resident memory of each live worker process, in bytes (the pid label names it "
        "under gunicorn).",
        (),
        "liveall",
    ),
    MetricSpec(
        "requests",
        "counter",
        "servinglib_requests_total",
        "Inference requests answered, by model, version, protocol and outcome "
        "(success, invalid_input, not_found, not_ready, shed, deadline_exceeded, too_large, "
        "model_error, nonfinite_output (the model answered NaN or Infinity in JSON), "
        "server_error).",
        ("model", "version", "protocol", "outcome"),
    ),
    MetricSpec(
        "request_duration",
        "histogram",
        "servinglib_request_duration_seconds",
        "Wall time from request received to response ready, in seconds.",
        ("model", "version", "protocol"),
        buckets=REQUEST_BUCKETS,
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
        buckets=_LOAD_BUCKETS,
    ),
    MetricSpec(
        "selftest_duration",
        "histogram",
        "servinglib_model_self_test_duration_seconds",
        "Time the self-tests of one version took in one worker, in seconds.",
        ("model", "version"),
        buckets=_LOAD_BUCKETS,
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
    MetricSpec(
        "input_rejected_total",
        "counter",
        "servinglib_input_validation_failures_total",
        "Requests whose input failed validation, by model and top-level field "
        "(fields outside the input schema are counted as _other).",
        ("model", "field"),
    ),
    MetricSpec(
        "data_quality_issues",
        "counter",
        "servinglib_data_quality_issues_total",
        "Data-quality problems of profiled versions, by model, version, field (a feature or "
        "output of the reference profile) and issue (missing, out_of_range, unseen_category, "
        "wrong_type).",
        ("model", "version", "field", "issue"),
    ),
    MetricSpec(
        "shadow_requests",
        "counter",
        "servinglib_shadow_requests_total",
        "Shadow copies that ran, by outcome: ok, error, timeout, refused (the shadow version "
        "is READY but its queue turned the copy away: full, or the copy could not finish "
        "within timeout_ms) or not_ready (the version cannot answer); every configured pair "
        "starts at 0.",
        (*_SHADOW_LABELS, "outcome"),
    ),
    MetricSpec(
        "shadow_dropped_total",
        "counter",
        "servinglib_shadow_dropped_total",
        "Shadow copies dropped because the bounded shadow executor was full; every "
        "configured pair starts at 0.",
        _SHADOW_LABELS,
    ),
    MetricSpec(
        "shadow_shed_total",
        "counter",
        "servinglib_shadow_shed_total",
        "Shadow copies not run because the shadows' CPU budget "
        "(shadow_executor.max_cpu_share) was spent; with a budget, every configured pair "
        "starts at 0.",
        _SHADOW_LABELS,
    ),
    MetricSpec(
        "shadow_latency",
        "histogram",
        "servinglib_shadow_latency_seconds",
        "Time a shadow version took to answer a copy, in seconds.",
        _SHADOW_LABELS,
        buckets=_LATENCY_BUCKETS,
    ),
    MetricSpec(
        "shadow_comparisons",
        "counter",
        "servinglib_shadow_comparisons_total",
        "Shadow answers compared with the primary's. Agreement ratio = "
        "servinglib_shadow_agreements_total / servinglib_shadow_comparisons_total.",
        _SHADOW_LABELS,
    ),
    MetricSpec(
        "shadow_agreements",
        "counter",
        "servinglib_shadow_agreements_total",
        "Shadow answers the comparator judged to agree with the primary's.",
        _SHADOW_LABELS,
    ),
    MetricSpec(
        "shadow_difference",
        "histogram",
        "servinglib_shadow_difference",
        "Difference between shadow and primary answers: the largest absolute difference "
        "(numeric comparator) or 1 - cosine similarity (cosine comparator). The exact, "
        "top1 and custom comparators report none.",
        _SHADOW_LABELS,
        buckets=_DIFFERENCE_BUCKETS,
    ),
    MetricSpec(
        "batch_size",
        "histogram",
        "servinglib_batch_size",
        "Requests per batch run by the dynamic batcher, by model and version.",
        ("model", "version"),
        buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    ),
    MetricSpec(
        "queue_time",
        "histogram",
        "servinglib_queue_time_seconds",
        "Time a request waited in the batcher's queue before its batch ran, in seconds.",
        ("model", "version"),
        buckets=_LATENCY_BUCKETS,
    ),
    MetricSpec(
        "queue_depth_gauge",
        "gauge",
        "servinglib_queue_depth",
        "Requests waiting in the batcher queues, summed over live workers.",
        ("model", "version"),
        "livesum",
    ),
    MetricSpec(
        "rollout_decisions",
        "counter",
        "servinglib_rollout_decisions_total",
        "Decisions of the rollout controller (written by the master): start, advance, "
        "promote, rollback, pause, resume, abort, note.",
        ("model", "candidate", "action"),
    ),
    MetricSpec(
        "rollout_step",
        "gauge",
        "servinglib_rollout_step",
        "The step a model's rollout is on (0 = the first), as the master last decided.",
        ("model", "candidate"),
        "mostrecent",
    ),
    MetricSpec(
        "prediction_log_records",
        "counter",
        "servinglib_prediction_log_records_total",
        "Prediction-log records by outcome: written, dropped (buffer full or sink down), or "
        "truncated (features or output summarized: larger than max_record_bytes).",
        ("outcome",),
    ),
    MetricSpec(
        "prediction_sink_records",
        "counter",
        "servinglib_prediction_sink_records_total",
        "Records of a prediction sink (Kafka, Parquet) by outcome: written to the sink, "
        "spooled to disk (sink down or slow), replayed from the spool, or truncated.",
        ("sink", "outcome"),
    ),
    MetricSpec(
        "prediction_sink_dropped",
        "counter",
        "servinglib_prediction_sink_dropped_total",
        "Records a prediction sink lost, by reason: buffer_full (memory buffer) or "
        "spool_full (disk spool at spool_max_bytes).",
        ("sink", "reason"),
    ),
    MetricSpec(
        "prediction_sink_spool_bytes",
        "gauge",
        "servinglib_prediction_sink_spool_bytes",
        "Bytes waiting in a prediction sink's disk spool, summed over live workers.",
        ("sink",),
        "livesum",
    ),
    MetricSpec(
        "prediction_sink_lag",
        "gauge",
        "servinglib_prediction_sink_lag_seconds",
        "Age of the oldest spooled record not yet delivered to the sink (0: none waiting).",
        ("sink",),
        "livemax",
    ),
)
