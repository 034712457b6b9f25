"""The report of one optimize run: JSON (every figure), Markdown (for a README) and a PNG chart.

The JSON has these top-level fields (:data:`REPORT_FIELDS`): ``schema_version``,
``created_at``, ``versions``, ``machine`` (CPU model, cores, AVX2 / AVX-512 VNNI / AVX-VNNI /
AMX flags), ``settings``, ``graph`` (graph optimization), ``baseline`` and ``optimized``
(path, size, single-request latency p50/p95 with every round and their spread, batched
throughput, metric value, batch invariance), ``chosen`` and ``choice_reason``, ``change``
(size reduction, speed-ups, and ``claims``: for p50, p95 and throughput the ratio, the
interval of per-round ratios and the verdict, "no measurable difference" unless the rounds
separate), ``accuracy`` (the deciding output's metric, why, loss and allowed loss, and
``outputs``: one row per judged output), ``quantization`` (share of weights stored as INT8,
operator types left float, ``essentially_fp32``), ``selftest_tolerance`` (the ``atol`` a
``test_data.json`` with FP32 expectations needs for this artifact), ``candidates`` (every
candidate tried, its verdict and its latency comparison), ``budgets``, ``warnings`` and
``passed``. Paths are relative to the report's directory. The document is strict JSON (a
non-finite number is written as null) and validates against
``servinglib/schema/optimize-report.schema.json``; the Markdown and the chart are rendered
from it alone.

Example::

    files = write_report(report, Path("reports"))
    print(files.markdown.read_text())
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from servinglib.optimize._chart import render_chart
from servinglib.optimize._markdown import render_markdown
from servinglib.optimize._report_sections import (
    claims,
    finite,
    non_finite,
    quantization,
    selftest_tolerance,
)
from servinglib.optimize.budgets import BudgetResult
from servinglib.optimize.compare import SpeedClaim, round_spread
from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.graph import GraphResult
from servinglib.optimize.invariance import InvarianceResult
from servinglib.optimize.measure import CpuInfo, LatencyStats, ThroughputStats
from servinglib.optimize.search import CandidateResult
from servinglib.optimize.weights import WeightShare

__all__ = [
    "REPORT_FIELDS",
    "ModelFigures",
    "OptimizeReport",
    "OutputRow",
    "ReportFiles",
    "render_chart",
    "render_markdown",
    "report_schema",
    "validate_report",
    "write_report",
]

SCHEMA_VERSION = 3

REPORT_FIELDS = (
    "schema_version",
    "created_at",
    "versions",
    "machine",
    "settings",
    "graph",
    "baseline",
    "optimized",
    "chosen",
    "choice_reason",
    "change",
    "accuracy",
    "quantization",
    "selftest_tolerance",
    "candidates",
    "budgets",
    "warnings",
    "passed",
)


@dataclass(frozen=True)
class ModelFigures:
    """What was measured for one model file."""

    path: Path
    size_mb: float
    latency: LatencyStats
    throughput: ThroughputStats
    metric_value: float
    invariance: InvarianceResult
    max_abs_diff_fp32: float = 0.0


@dataclass(frozen=True)
class OutputRow:
    """How one judged output fared: metric, why, FP32 and INT8 values, loss and budget."""

    output: str
    metric: str
    why: str
    fp32: float
    optimized: float | None
    loss: float | None
    max_loss: float | None
    passed: bool | None
    detail: dict[str, float]


@dataclass(frozen=True)
class OptimizeReport:
    """Everything one optimize run measured and decided."""

    created_at: str
    versions: dict[str, str]
    machine: CpuInfo
    settings: dict[str, Any]
    graph: GraphResult | None
    baseline: ModelFigures
    optimized: ModelFigures | None
    chosen: str | None
    choice_reason: str
    metric: str
    metric_reason: str
    loss: float | None
    max_loss: float | None
    metric_detail: dict[str, float]
    outputs: tuple[OutputRow, ...]
    weights: WeightShare | None
    candidates: tuple[CandidateResult, ...]
    budgets: tuple[BudgetResult, ...]
    warnings: tuple[str, ...]
    passed: bool

    def to_dict(self, base: Path | None = None) -> dict[str, Any]:
        """The JSON document (plain types only); paths relative to ``base`` when given."""
        document = {
            "schema_version": SCHEMA_VERSION,
            "created_at": self.created_at,
            "versions": dict(self.versions),
            "machine": {**_plain(self.machine), "vnni": self.machine.vnni},
            "settings": _plain(self.settings),
            "graph": _plain(self.graph),
            "baseline": _figures(self.baseline, base),
            "optimized": _figures(self.optimized, base),
            "chosen": self.chosen,
            "choice_reason": self.choice_reason,
            "change": _change(self.baseline, self.optimized),
            "accuracy": {
                "metric": self.metric,
                "why": self.metric_reason,
                "fp32": self.baseline.metric_value,
                "optimized": self.optimized.metric_value if self.optimized else None,
                "loss": self.loss,
                "max_loss": self.max_loss,
                "detail": dict(self.metric_detail),
                "outputs": [_plain(row) for row in self.outputs],
            },
            "quantization": quantization(self.weights),
            "selftest_tolerance": selftest_tolerance(self.optimized),
            "candidates": [_candidate(c) for c in self.candidates],
            "budgets": [{**_plain(b), "description": b.describe()} for b in self.budgets],
            "warnings": list(self.warnings),
            "passed": self.passed,
        }
        strict: dict[str, Any] = finite(document)
        return strict

    def claims(self) -> list[SpeedClaim]:
        """What may be said of INT8's speed against FP32 (empty without an INT8 model)."""
        return claims(self.baseline, self.optimized)


@dataclass(frozen=True)
class ReportFiles:
    """Where the report was written."""

    json: Path
    markdown: Path
    chart: Path


def _plain(value: Any) -> Any:
    """Dataclasses, paths and tuples as JSON-friendly values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float | int | str | bool) or value is None:
        return value
    return float(value) if hasattr(value, "__float__") else str(value)


def _invariance(result: InvarianceResult | None) -> dict[str, Any] | None:
    return None if result is None else {**_plain(result), "invariant": result.invariant}


def _relative(path: Path, base: Path | None) -> str:
    """``path`` relative to the report; just its name when the two share no directory."""
    if base is None:
        return path.as_posix()
    # a relative path is relative to the working directory, not to the report
    target, origin = path.absolute().resolve(), base.absolute().resolve()
    try:
        common = Path(os.path.commonpath([target, origin]))
    except ValueError:  # another drive (Windows)
        return path.name
    if common == Path(common.anchor):
        # e.g. a model in a temporary directory: its location means nothing elsewhere
        return path.name
    return Path(os.path.relpath(target, origin)).as_posix()


def _latency(stats: LatencyStats | None) -> dict[str, Any] | None:
    if stats is None:
        return None
    return {
        **_plain(stats),
        "rounds": len(stats.rounds_p50_ms),
        "round_spread": round_spread(stats.rounds_p50_ms),
    }


def _figures(figures: ModelFigures | None, base: Path | None) -> dict[str, Any] | None:
    if figures is None:
        return None
    return {
        "path": _relative(figures.path, base),
        "size_mb": figures.size_mb,
        "latency_ms": _latency(figures.latency),
        "throughput": {
            **_plain(figures.throughput),
            "round_spread": round_spread(figures.throughput.rounds_samples_per_s),
        },
        "metric_value": figures.metric_value,
        "invariance": _invariance(figures.invariance),
    }


def _candidate(candidate: CandidateResult) -> dict[str, Any]:
    return {
        "name": candidate.name,
        "options": _plain(candidate.options),
        "size_mb": candidate.size_mb,
        "metric": _plain(candidate.metric),
        "outputs": [
            {
                **_plain(score.result),
                "output": score.output,
                "max_loss": score.max_loss,
                "passed": score.passed,
            }
            for score in candidate.scores
        ],
        "quantization": quantization(candidate.weights),
        "invariance": _invariance(candidate.invariance),
        "latency_ms": _latency(candidate.latency),
        "accepted": candidate.accepted,
        "reasons": list(candidate.reasons),
        "comparison": candidate.comparison,
    }


def _change(baseline: ModelFigures, optimized: ModelFigures | None) -> dict[str, Any]:
    if optimized is None:
        return {}

    def ratio(a: float, b: float) -> float:
        return a / b if b else 0.0

    return {
        "size_reduction_pct": 100.0 * (1.0 - ratio(optimized.size_mb, baseline.size_mb)),
        "p50_speedup": ratio(baseline.latency.p50_ms, optimized.latency.p50_ms),
        "p95_speedup": ratio(baseline.latency.p95_ms, optimized.latency.p95_ms),
        "throughput_speedup": ratio(
            optimized.throughput.samples_per_s, baseline.throughput.samples_per_s
        ),
        "claims": {
            claim.figure: {
                "ratio": claim.ratio,
                "interval": [claim.low, claim.high],
                "rounds": claim.rounds,
                "verdict": claim.verdict,
                "why": claim.why,
                "description": claim.describe(),
            }
            for claim in claims(baseline, optimized)
        },
    }


@cache
def report_schema() -> dict[str, Any]:
    """The published JSON Schema of ``optimize-report.json`` (``servinglib/schema/``)."""
    text = (
        resources.files("servinglib.schema")
        .joinpath("optimize-report.schema.json")
        .read_text(encoding="utf-8")
    )
    schema: dict[str, Any] = json.loads(text)
    return schema


def validate_report(document: dict[str, Any]) -> None:
    """Check a report document against :func:`report_schema`.

    Raises:
        OptimizeError: the first violation, with its JSON path.
    """
    import jsonschema

    where = non_finite(document, "")
    if where is not None:
        raise OptimizeError(
            f"optimize report holds a non-finite number at {where or '(top level)'}: strict "
            "JSON has no NaN or Infinity; write null"
        )
    validator = jsonschema.Draft202012Validator(report_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise OptimizeError(
            f"optimize report does not match its schema at {where}: {error.message}"
        )


def write_report(
    report: OptimizeReport, directory: Path, stem: str = "optimize-report"
) -> ReportFiles:
    """Write ``<stem>.json``, ``<stem>.md`` and ``<stem>.png`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    document = report.to_dict(base=directory)
    validate_report(document)
    files = ReportFiles(
        json=directory / f"{stem}.json",
        markdown=directory / f"{stem}.md",
        chart=directory / f"{stem}.png",
    )
    files.json.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    files.markdown.write_text(render_markdown(document), encoding="utf-8")
    render_chart(document, files.chart)
    return files
