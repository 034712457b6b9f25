"""What the Grafana dashboard shows: its rows, its panels and their PromQL.

Metric names come from :data:`servinglib.monitoring.metrics.METRIC_SPECS`, so a renamed
metric renames every query, and :func:`check_coverage` fails when a declared metric has no
panel. ``generate_dashboard.py`` turns these declarations into Grafana's JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from servinglib.lifecycle.registry import VersionState
from servinglib.monitoring.drift import DRIFT_GAUGES
from servinglib.monitoring.metrics import METRIC_SPECS, MetricSpec

__all__ = [
    "MODEL_SELECTOR",
    "Panel",
    "Query",
    "Section",
    "check_coverage",
    "name",
    "quantile",
    "rate",
    "sections",
    "series",
]

_RATE = "[$__rate_interval]"
MODEL_SELECTOR = 'model=~"$model"'
_SPECS: dict[str, MetricSpec] = {spec.attr: spec for spec in METRIC_SPECS}

_SERVER_ERRORS = "model_error|nonfinite_output|server_error|not_ready|shed|deadline_exceeded"
_REJECTED = "invalid_input|not_found|too_large"
_SHADOW_BY = "model, primary_version, shadow_version"
_PSI = DRIFT_GAUGES[0][0]
_DRIFT_THRESHOLDS: Mapping[str, Any] = {
    "defaults": {
        "thresholds": {
            "mode": "absolute",
            "steps": [
                {"color": "green", "value": None},
                {"color": "yellow", "value": 0.1},
                {"color": "red", "value": 0.25},
            ],
        },
        "custom": {"thresholdsStyle": {"mode": "line"}},
    }
}
_SHADOW_LEGEND = "{{model}} {{primary_version}} → {{shadow_version}}"


def name(attr: str, suffix: str = "") -> str:
    """The exposed name of the metric declared as ``attr`` in METRIC_SPECS, plus ``suffix``."""
    return _SPECS[attr].name + suffix


def series(attr: str, suffix: str = "", selector: str = MODEL_SELECTOR) -> str:
    """``metric{selector}``: the series of one metric for the selected models."""
    return f"{name(attr, suffix)}{{{selector}}}"


def rate(attr: str, by: str, selector: str = MODEL_SELECTOR, suffix: str = "") -> str:
    """``sum by (by) (rate(metric{selector}[$__rate_interval]))``."""
    grouping = f"sum by ({by}) " if by else "sum"
    labels = f"{{{selector}}}" if selector else ""
    return f"{grouping}(rate({name(attr, suffix)}{labels}{_RATE}))"


def quantile(q: float, attr: str, by: str, selector: str = MODEL_SELECTOR) -> str:
    """The ``q`` quantile of a histogram, aggregated over workers and pods before it is taken."""
    grouping = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, {rate(attr, grouping, selector, '_bucket')})"


@dataclass(frozen=True)
class Query:
    """One panel target: PromQL and its legend."""

    expr: str
    legend: str = ""
    table: bool = False  # an instant query shown as a table
    heatmap: bool = False  # buckets as heatmap rows


@dataclass(frozen=True)
class Panel:
    """A dashboard panel; ``metrics`` are the METRIC_SPECS attributes it shows."""

    title: str
    summary: str
    metrics: tuple[str, ...]
    queries: tuple[Query, ...]
    kind: str = "timeseries"
    unit: str = "short"
    width: int = 12
    height: int = 8
    field_config: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    transformations: tuple[Mapping[str, Any], ...] = ()
    repeat: str = ""  # a dashboard variable: one copy of the panel per selected value

    def description(self) -> str:
        """The summary, then the declared description of every metric shown."""
        lines = [self.summary, ""]
        lines += [f"- `{_SPECS[attr].name}`: {_SPECS[attr].documentation}" for attr in self.metrics]
        return "\n".join(lines)


@dataclass(frozen=True)
class Section:
    """A row of the dashboard and the panels under it."""

    title: str
    panels: tuple[Panel, ...]


_STATE_COLOURS = {
    VersionState.READY.value: "green",
    VersionState.FAILED.value: "red",
}


def _state_mappings() -> list[dict[str, Any]]:
    options = {
        state.value: {"index": i, "color": _STATE_COLOURS.get(state.value, "yellow")}
        for i, state in enumerate(VersionState)
    }
    return [{"type": "value", "options": options}]


def sections() -> tuple[Section, ...]:
    all_requests = rate("requests", "")
    # `or vector(0)`: a ratio of 0, not "no data", while no request has failed.
    server_errors = rate("requests", "", f'{MODEL_SELECTOR}, outcome=~"{_SERVER_ERRORS}"')
    rejected = rate("requests", "", f'{MODEL_SELECTOR}, outcome=~"{_REJECTED}"')
    versioned = f'{MODEL_SELECTOR}, version!=""'  # requests rejected before routing have no version
    shadow_ran = rate("shadow_requests", "model, shadow_version")
    # A labelled counter exists only once incremented: count a missing one as 0.
    dropped = f"({rate('shadow_dropped_total', 'model, shadow_version')} or {shadow_ran} * 0)"
    comparisons = rate("shadow_comparisons", _SHADOW_BY)
    agreements = f"({rate('shadow_agreements', _SHADOW_BY)} or {comparisons} * 0)"
    return (
        Section(
            "Requests",
            (
                Panel(
                    "Request rate by outcome",
                    "Inference requests per second, by outcome.",
                    ("requests",),
                    (Query(rate("requests", "outcome"), "{{outcome}}"),),
                    unit="reqps",
                    width=8,
                ),
                Panel(
                    "Error ratio",
                    "Share of inference requests that failed on the server side (5xx: model "
                    "errors, server errors, versions not ready, requests shed by a full queue "
                    "or past their deadline) or were rejected (4xx).",
                    ("requests",),
                    (
                        Query(
                            f"({server_errors} or vector(0)) / {all_requests}",
                            "server errors (5xx)",
                        ),
                        Query(f"({rejected} or vector(0)) / {all_requests}", "rejected (4xx)"),
                    ),
                    unit="percentunit",
                    width=8,
                    field_config={"min": 0},
                ),
                Panel(
                    "Answers by version (traffic split)",
                    "Successful answers per second by the version that answered: a canary's "
                    "share of traffic shows here.",
                    ("requests",),
                    (
                        Query(
                            rate(
                                "requests", "model, version", f'{MODEL_SELECTOR}, outcome="success"'
                            ),
                            "{{model}} v{{version}}",
                        ),
                    ),
                    unit="reqps",
                    width=8,
                ),
                Panel(
                    "Latency p50 / p95 / p99",
                    "Request latency quantiles, computed from the histogram after summing "
                    "the buckets of every worker and pod.",
                    ("request_duration",),
                    tuple(
                        Query(quantile(q, "request_duration", ""), f"p{round(q * 100)}")
                        for q in (0.5, 0.95, 0.99)
                    ),
                    unit="s",
                    width=8,
                ),
                Panel(
                    "Latency p99 by version",
                    "p99 request latency of each version: compare a canary with the default.",
                    ("request_duration",),
                    (
                        Query(
                            quantile(0.99, "request_duration", "model, version", versioned),
                            "{{model}} v{{version}}",
                        ),
                    ),
                    unit="s",
                    width=8,
                ),
                Panel(
                    "Requests in flight",
                    "Requests being handled right now, by protocol (all models).",
                    ("in_flight",),
                    (Query(f"sum by (protocol) ({name('in_flight')})", "{{protocol}}"),),
                    width=8,
                ),
            ),
        ),
        Section(
            "Model versions",
            (
                Panel(
                    "Version state",
                    "The lifecycle state of every version (in at least one live worker).",
                    ("model_state",),
                    (
                        Query(
                            f"max by (model, version, state) ({series('model_state')}) == 1",
                            table=True,
                        ),
                    ),
                    kind="table",
                    width=8,
                    transformations=(
                        {
                            "id": "organize",
                            "options": {
                                "excludeByName": {"Time": True, "Value": True},
                                "indexByName": {"model": 0, "version": 1, "state": 2},
                                "renameByName": {},
                            },
                        },
                    ),
                    field_config={
                        "overrides": [
                            {
                                "matcher": {"id": "byName", "options": "state"},
                                "properties": [
                                    {"id": "mappings", "value": _state_mappings()},
                                    {
                                        "id": "custom.cellOptions",
                                        "value": {"type": "color-text"},
                                    },
                                ],
                            }
                        ]
                    },
                ),
                Panel(
                    "Self-tests passed",
                    "Whether every self-test of the version passed in every live worker.",
                    ("selftest_passed",),
                    (
                        Query(
                            f"min by (model, version) ({series('selftest_passed')})",
                            "{{model}} v{{version}}",
                        ),
                    ),
                    kind="stat",
                    width=8,
                    field_config={
                        "mappings": [
                            {
                                "type": "value",
                                "options": {
                                    "0": {"index": 0, "text": "FAILED", "color": "red"},
                                    "1": {"index": 1, "text": "passed", "color": "green"},
                                },
                            }
                        ],
                        "color": {"mode": "thresholds"},
                        "thresholds": {
                            "mode": "absolute",
                            "steps": [
                                {"color": "red", "value": None},
                                {"color": "green", "value": 1},
                            ],
                        },
                    },
                    options={
                        "colorMode": "background",
                        "graphMode": "none",
                        "textMode": "value_and_name",
                        "justifyMode": "auto",
                        "orientation": "auto",
                        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    },
                ),
                Panel(
                    "Mean load and self-test time per version",
                    "Average time of Model.load() and of the self-tests per version, over "
                    "every load since the server started.",
                    ("load_duration", "selftest_duration"),
                    tuple(
                        Query(
                            f"sum by (model, version) ({series(attr, '_sum')})"
                            f" / sum by (model, version) ({series(attr, '_count')})",
                            f"{label} {{{{model}}}} v{{{{version}}}}",
                        )
                        for attr, label in (
                            ("load_duration", "load"),
                            ("selftest_duration", "self-test"),
                        )
                    ),
                    unit="s",
                    width=8,
                ),
            ),
        ),
        Section(
            "Inputs",
            (
                Panel(
                    "Input validation failures by field",
                    "Requests rejected because their input failed validation, by the "
                    "top-level field at fault.",
                    ("input_rejected_total",),
                    (Query(rate("input_rejected_total", "model, field"), "{{model}} {{field}}"),),
                    unit="reqps",
                    width=24,
                ),
            ),
        ),
        Section(
            "Shadow traffic",
            (
                Panel(
                    "Shadow copies by outcome",
                    "Shadow copies that ran per second, by outcome (ok, error, timeout, "
                    "not_ready). Only ok copies are compared.",
                    ("shadow_requests",),
                    (
                        Query(
                            rate("shadow_requests", "model, shadow_version, outcome"),
                            "{{model}} v{{shadow_version}} {{outcome}}",
                        ),
                    ),
                    unit="ops",
                    width=8,
                ),
                Panel(
                    "Shadow copies dropped or shed",
                    "Copies dropped per second because the shadow executor of a worker was "
                    "full, the share of copies dropped, and copies shed because the shadows' "
                    "CPU budget (shadow_executor.max_cpu_share) was spent.",
                    ("shadow_dropped_total", "shadow_shed_total", "shadow_requests"),
                    (
                        Query(
                            rate("shadow_dropped_total", "model, shadow_version"),
                            "dropped/s {{model}} v{{shadow_version}}",
                        ),
                        Query(
                            rate("shadow_shed_total", "model, shadow_version"),
                            "shed/s {{model}} v{{shadow_version}}",
                        ),
                        Query(
                            f"{dropped} / ({dropped} + {shadow_ran})",
                            "share dropped {{model}} v{{shadow_version}}",
                        ),
                    ),
                    width=8,
                ),
                Panel(
                    "Shadow latency p50 / p99",
                    "How long shadow versions take to answer a copy.",
                    ("shadow_latency",),
                    tuple(
                        Query(
                            quantile(q, "shadow_latency", "model, shadow_version"),
                            f"p{round(q * 100)} {{{{model}}}} v{{{{shadow_version}}}}",
                        )
                        for q in (0.5, 0.99)
                    ),
                    unit="s",
                    width=8,
                ),
                Panel(
                    "Agreement ratio",
                    "Share of compared shadow answers that the comparator judged to agree "
                    "with the primary's.",
                    ("shadow_agreements", "shadow_comparisons"),
                    (
                        Query(
                            f"{agreements} / {comparisons}",
                            _SHADOW_LEGEND,
                        ),
                    ),
                    unit="percentunit",
                    width=12,
                    field_config={"min": 0, "max": 1},
                ),
                Panel(
                    "Shadow vs primary difference p50 / p99",
                    "How far shadow answers are from the primary's: the largest absolute "
                    "difference (numeric comparator) or 1 - cosine similarity (cosine). "
                    "Only those two comparators measure a difference: a pair compared with "
                    "exact, top1 or a custom function has no series here (see the agreement "
                    "ratio instead).",
                    ("shadow_difference",),
                    tuple(
                        Query(
                            quantile(q, "shadow_difference", _SHADOW_BY),
                            f"p{round(q * 100)} {_SHADOW_LEGEND}",
                        )
                        for q in (0.5, 0.99)
                    ),
                    width=12,
                ),
            ),
        ),
        Section(
            "Dynamic batching",
            (
                Panel(
                    "Batch size p50 / p95 and mean",
                    "Requests per batch run by predict_batch, per version (models with "
                    "`batching:` only).",
                    ("batch_size",),
                    (
                        *(
                            Query(
                                quantile(q, "batch_size", "model, version"),
                                f"p{round(q * 100)} {{{{model}}}} v{{{{version}}}}",
                            )
                            for q in (0.5, 0.95)
                        ),
                        Query(
                            f"{rate('batch_size', 'model, version', suffix='_sum')}"
                            f" / {rate('batch_size', 'model, version', suffix='_count')}",
                            "mean {{model}} v{{version}}",
                        ),
                    ),
                    width=8,
                ),
                Panel(
                    "Queue time p50 / p99",
                    "How long requests waited in the batcher's queue before their batch ran.",
                    ("queue_time",),
                    tuple(
                        Query(
                            quantile(q, "queue_time", "model, version"),
                            f"p{round(q * 100)} {{{{model}}}} v{{{{version}}}}",
                        )
                        for q in (0.5, 0.99)
                    ),
                    unit="s",
                    width=8,
                ),
                Panel(
                    "Queue depth, shed and late requests",
                    "Requests waiting in the batcher queues, and requests refused because a "
                    "queue was full (shed, 503) or answered too late (deadline_exceeded, 504).",
                    ("queue_depth_gauge", "requests"),
                    (
                        Query(
                            f"sum by (model, version) ({series('queue_depth_gauge')})",
                            "queued {{model}} v{{version}}",
                        ),
                        Query(
                            rate(
                                "requests",
                                "model, outcome",
                                f'{MODEL_SELECTOR}, outcome=~"shed|deadline_exceeded"',
                            ),
                            "{{outcome}}/s {{model}}",
                        ),
                    ),
                    width=8,
                ),
            ),
        ),
        Section(
            "Drift and data quality",
            (
                Panel(
                    "Feature drift (PSI)",
                    "Population stability index of each profiled feature over the drift window, "
                    "against the version's reference profile (computed at scrape time from "
                    "every worker's counts). Below 0.1 stable; above 0.25 drifted.",
                    (),
                    (
                        Query(
                            f"max by (model, version, field) ({_PSI}{{{MODEL_SELECTOR}, "
                            'role="feature"})',
                            "{{model}} v{{version}} {{field}}",
                        ),
                    ),
                    width=8,
                    field_config=_DRIFT_THRESHOLDS,
                ),
                Panel(
                    "Output drift (PSI)",
                    "Population stability index of each profiled output: the model answers "
                    "differently from what it did on its reference data.",
                    (),
                    (
                        Query(
                            f"max by (model, version, field) ({_PSI}{{{MODEL_SELECTOR}, "
                            'role="output"})',
                            "{{model}} v{{version}} {{field}}",
                        ),
                    ),
                    width=8,
                    field_config=_DRIFT_THRESHOLDS,
                ),
                Panel(
                    "Output distribution by version ($output)",
                    "Answers of the drift window per bin of one output, on the output's own "
                    "bins from the reference profile (deciles of the reference for numbers, "
                    "the top categories for labels), one series per version: compare a "
                    "canary's outputs with the default's.",
                    (),
                    (
                        Query(
                            f"sum by (model, version, bin) "
                            f'({DRIFT_GAUGES[3][0]}{{{MODEL_SELECTOR}, output="$output"}})',
                            "{{model}} v{{version}} ≤ {{bin}}",
                        ),
                    ),
                    width=8,
                ),
                Panel(
                    "Data-quality problems",
                    "Missing values, values outside the reference range, unseen categories and "
                    "wrong types per second, by field and issue.",
                    ("data_quality_issues",),
                    (
                        Query(
                            rate("data_quality_issues", "model, version, field, issue"),
                            "{{model}} v{{version}} {{field}} {{issue}}",
                        ),
                    ),
                    unit="ops",
                    width=8,
                ),
            ),
        ),
        Section(
            "Composed models",
            (
                Panel(
                    "Step duration p50 / p99",
                    "Each step of a pipeline or member of an ensemble, through its model's own "
                    "lane (queueing and batching included).",
                    ("step_duration",),
                    tuple(
                        Query(
                            quantile(q, "step_duration", "model, version, step"),
                            f"p{round(q * 100)} {{{{model}}}} v{{{{version}}}} {{{{step}}}}",
                        )
                        for q in (0.5, 0.99)
                    ),
                    unit="s",
                    width=12,
                ),
                Panel(
                    "Step errors",
                    "Steps that failed or could not start within the remaining deadline; an "
                    "ensemble answering from the rest counts its failed members here.",
                    ("step_errors",),
                    (
                        Query(
                            rate("step_errors", "model, version, step"),
                            "{{model}} v{{version}} {{step}}",
                        ),
                    ),
                    unit="ops",
                    width=12,
                ),
            ),
        ),
        Section(
            "Rollouts",
            (
                Panel(
                    "Rollout step",
                    "The step each model's rollout is on (0 = the first), as the controller in "
                    "the master last decided; see servinglib rollout status MODEL.",
                    ("rollout_step",),
                    (Query(series("rollout_step"), "{{model}} candidate {{candidate}}"),),
                    unit="short",
                ),
                Panel(
                    "Rollout decisions",
                    "Advances, promotions and rollbacks of the rollout controller; a rollback "
                    "fires ServinglibRolloutRolledBack.",
                    ("rollout_decisions",),
                    (
                        Query(
                            f"sum by (model, candidate, action) "
                            f"(increase({name('rollout_decisions')}{{{MODEL_SELECTOR}}}[10m]))",
                            "{{model}} {{candidate}} {{action}}",
                        ),
                    ),
                    unit="short",
                ),
            ),
        ),
        Section(
            "Model metrics",
            (
                Panel(
                    "$model_metric",
                    "A metric the model code counts itself (Model.metrics), per second, by "
                    "model and version: one panel per metric chosen in 'Model metric' "
                    "(counters and histogram counts).",
                    (),
                    (
                        Query(
                            'sum by (model, version) (rate({__name__=~"$model_metric", '
                            f"{MODEL_SELECTOR}}}[$__rate_interval]))",
                            "{{model}} v{{version}}",
                        ),
                    ),
                    unit="ops",
                    width=24,
                    repeat="model_metric",
                ),
            ),
        ),
        Section(
            "Prediction log",
            (
                Panel(
                    "Prediction-log records",
                    "Records written to the prediction log per second, and records dropped "
                    "(buffer full, or the database unreachable after retries). All models.",
                    ("prediction_log_records",),
                    (Query(rate("prediction_log_records", "outcome", ""), "{{outcome}}"),),
                    unit="ops",
                    width=24,
                ),
                Panel(
                    "Prediction-sink records",
                    "Records per second of each sink (Kafka, Parquet): written, spooled to disk "
                    "while the sink is down or slow, replayed from the spool, and dropped by "
                    "reason (spool_full fires ServinglibPredictionSpoolFull).",
                    ("prediction_sink_records", "prediction_sink_dropped"),
                    (
                        Query(
                            rate("prediction_sink_records", "sink, outcome", ""),
                            "{{sink}} {{outcome}}",
                        ),
                        Query(
                            rate("prediction_sink_dropped", "sink, reason", ""),
                            "{{sink}} dropped {{reason}}",
                        ),
                    ),
                    unit="ops",
                    width=12,
                ),
                Panel(
                    "Prediction-sink spool",
                    "Bytes waiting in each sink's disk spool (all workers) and the age of the "
                    "oldest spooled record (lag).",
                    ("prediction_sink_spool_bytes", "prediction_sink_lag"),
                    (
                        Query(
                            f"sum by (sink) ({name('prediction_sink_spool_bytes')})",
                            "{{sink}} bytes",
                        ),
                        Query(f"max by (sink) ({name('prediction_sink_lag')})", "{{sink}} lag s"),
                    ),
                    unit="bytes",
                    width=12,
                ),
            ),
        ),
        Section(
            "Workers",
            (
                Panel(
                    "Lost model calls",
                    "Calls the watchdog gave up on (stuck past their deadline plus "
                    "server.watchdog_margin_s); a version whose threads are all lost turns "
                    "not ready and its worker is replaced.",
                    ("lost_calls",),
                    (Query(rate("lost_calls", "model, version"), "{{model}} v{{version}}"),),
                    unit="ops",
                ),
                Panel(
                    "Worker resident memory",
                    "Resident memory of each worker; server.max_rss_mb replaces a worker "
                    "gracefully above it.",
                    ("resident_memory",),
                    (Query(series("resident_memory", selector=""), "pid {{pid}}"),),
                    unit="bytes",
                ),
            ),
        ),
    )


def check_coverage(sections: Sequence[Section]) -> None:
    """Every declared metric has a panel, and every panel queries the metrics it names."""
    shown: set[str] = set()
    for section in sections:
        for panel in section.panels:
            expressions = " ".join(query.expr for query in panel.queries)
            for attr in panel.metrics:
                if name(attr).removesuffix("_total") not in expressions:
                    raise ValueError(f"panel {panel.title!r} names {attr!r} but never queries it")
            shown.update(panel.metrics)
    missing = [spec.name for spec in METRIC_SPECS if spec.attr not in shown]
    if missing:
        raise ValueError(f"no dashboard panel shows {', '.join(missing)}; add one in panels.py")
