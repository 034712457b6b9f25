"""The report of one optimize run: JSON (every figure), Markdown (for a README) and a PNG chart.

The JSON has these top-level fields (:data:`REPORT_FIELDS`): ``created_at``, ``versions``,
``machine`` (CPU model, cores, AVX2 / AVX-512 VNNI / AVX-VNNI / AMX flags), ``settings``,
``graph`` (graph optimization), ``baseline`` and ``optimized`` (path, size, single-request
latency p50/p95, batched throughput, metric value, batch invariance), ``chosen``, ``change``
(size reduction, speed-ups), ``accuracy`` (metric, loss, allowed loss, detail),
``candidates`` (every candidate tried and its verdict), ``budgets``, ``warnings`` and
``passed``. The Markdown and the chart are rendered from that JSON document alone.

Example::

    files = write_report(report, Path("reports"))
    print(files.markdown.read_text())
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servinglib.optimize._deps import require
from servinglib.optimize.budgets import BudgetResult
from servinglib.optimize.graph import GraphResult
from servinglib.optimize.invariance import InvarianceResult
from servinglib.optimize.measure import CpuInfo, LatencyStats, ThroughputStats
from servinglib.optimize.search import CandidateResult

__all__ = [
    "REPORT_FIELDS",
    "ModelFigures",
    "OptimizeReport",
    "ReportFiles",
    "render_chart",
    "render_markdown",
    "write_report",
]

REPORT_FIELDS = (
    "created_at",
    "versions",
    "machine",
    "settings",
    "graph",
    "baseline",
    "optimized",
    "chosen",
    "change",
    "accuracy",
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
    metric: str
    loss: float | None
    max_loss: float | None
    metric_detail: dict[str, float]
    candidates: tuple[CandidateResult, ...]
    budgets: tuple[BudgetResult, ...]
    warnings: tuple[str, ...]
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (plain types only)."""
        document = {
            "created_at": self.created_at,
            "versions": dict(self.versions),
            "machine": {**_plain(self.machine), "vnni": self.machine.vnni},
            "settings": _plain(self.settings),
            "graph": _plain(self.graph),
            "baseline": _figures(self.baseline),
            "optimized": _figures(self.optimized),
            "chosen": self.chosen,
            "change": _change(self.baseline, self.optimized),
            "accuracy": {
                "metric": self.metric,
                "fp32": self.baseline.metric_value,
                "optimized": self.optimized.metric_value if self.optimized else None,
                "loss": self.loss,
                "max_loss": self.max_loss,
                "detail": dict(self.metric_detail),
            },
            "candidates": [_candidate(c) for c in self.candidates],
            "budgets": [{**_plain(b), "description": b.describe()} for b in self.budgets],
            "warnings": list(self.warnings),
            "passed": self.passed,
        }
        return document


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


def _figures(figures: ModelFigures | None) -> dict[str, Any] | None:
    if figures is None:
        return None
    return {
        "path": str(figures.path),
        "size_mb": figures.size_mb,
        "latency_ms": _plain(figures.latency),
        "throughput": _plain(figures.throughput),
        "metric_value": figures.metric_value,
        "invariance": _invariance(figures.invariance),
    }


def _candidate(candidate: CandidateResult) -> dict[str, Any]:
    return {
        "name": candidate.name,
        "options": _plain(candidate.options),
        "size_mb": candidate.size_mb,
        "metric": _plain(candidate.metric),
        "invariance": _invariance(candidate.invariance),
        "latency_ms": _plain(candidate.latency),
        "accepted": candidate.accepted,
        "reasons": list(candidate.reasons),
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
    }


def _speed(ratio: float) -> str:
    """``2.75x faster`` or ``1.14x slower`` for a ratio of FP32 to INT8 time."""
    if ratio >= 1.0 or ratio <= 0.0:
        return f"{ratio:.2f}x faster"
    return f"{1.0 / ratio:.2f}x slower"


def _yes_no(invariance: dict[str, Any] | None) -> str:
    if invariance is None:
        return "-"
    verdict = "yes" if invariance["invariant"] else "**no**"
    return f"{verdict} ({invariance['worst_relative']:.2g})"


def _metric_cell(accuracy: dict[str, Any], which: str) -> str:
    value = accuracy[which]
    if value is None:
        return "-"
    text = f"{value:.4f}"
    detail = accuracy["detail"]
    if which == "optimized" and accuracy["metric"] == "cosine" and "min" in detail:
        text += f" (min {detail['min']:.4f})"
    return text


def render_markdown(document: dict[str, Any]) -> str:
    """The report as Markdown, from its JSON document."""
    base, opt, change, acc = (
        document["baseline"],
        document["optimized"],
        document["change"],
        document["accuracy"],
    )
    settings, machine = document["settings"], document["machine"]
    lines = [f"# Optimization report: `{Path(base['path']).name}`", ""]
    if document["chosen"]:
        lines.append(f"Chosen: **{document['chosen']}** ({settings['mode']}).")
    else:
        lines.append("**No candidate fits the budgets**: see the candidates below.")
    lines += ["", "| | FP32 | INT8 | change |", "|---|---|---|---|"]

    def row(label: str, b: str, o: str, c: str) -> None:
        lines.append(f"| {label} | {b} | {o} | {c} |")

    def opt_value(fmt: str, *keys: str) -> str:
        if opt is None:
            return "-"
        value: Any = opt
        for key in keys:
            value = value[key]
        return format(value, fmt)

    batch = base["throughput"]["batch_size"]
    row(
        "size (MB)",
        f"{base['size_mb']:.2f}",
        opt_value(".2f", "size_mb"),
        f"-{change['size_reduction_pct']:.1f} %" if change else "-",
    )
    row(
        "single request p50 (ms)",
        f"{base['latency_ms']['p50_ms']:.3f}",
        opt_value(".3f", "latency_ms", "p50_ms"),
        _speed(change["p50_speedup"]) if change else "-",
    )
    row(
        "single request p95 (ms)",
        f"{base['latency_ms']['p95_ms']:.3f}",
        opt_value(".3f", "latency_ms", "p95_ms"),
        _speed(change["p95_speedup"]) if change else "-",
    )
    row(
        f"throughput, batch {batch} (samples/s)",
        f"{base['throughput']['samples_per_s']:.0f}",
        opt_value(".0f", "throughput", "samples_per_s"),
        f"{change['throughput_speedup']:.2f}x" if change else "-",
    )
    loss = acc["loss"]
    row(
        f"{acc['metric']} vs {'labels' if acc['metric'] == 'accuracy' else 'FP32'}",
        _metric_cell(acc, "fp32"),
        _metric_cell(acc, "optimized"),
        f"loss {loss:.4f}" + (f" (max {acc['max_loss']:g})" if acc["max_loss"] is not None else "")
        if loss is not None
        else "-",
    )
    row(
        "batch-invariant (worst deviation)",
        _yes_no(base["invariance"]),
        _yes_no(opt["invariance"]) if opt else "-",
        "",
    )
    flags = ", ".join(
        f"{name} {'yes' if machine[key] else 'no'}"
        for name, key in (
            ("AVX2", "avx2"),
            ("AVX-512 VNNI", "avx512_vnni"),
            ("AVX-VNNI", "avx_vnni"),
        )
    )
    lines += [
        "",
        f"Measured on {machine['model']} ({machine['logical_cores']} logical cores; {flags}), "
        f"onnxruntime {document['versions'].get('onnxruntime', '?')}, "
        f"{settings['threads']} intra-op thread(s); latency: median over {settings['repeats']} "
        f"rounds of {settings['iterations']} single requests after {settings['warmup']} warm-up "
        f"runs; validation: {settings['validation_samples']} samples of "
        f"`{Path(settings['validation']).name}`.",
        "",
        "## Candidates",
        "",
        "| candidate | size (MB) | metric | loss | batch-invariant | p50 (ms) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in document["candidates"]:
        metric = c["metric"]
        lines.append(
            "| {name} | {size} | {value} | {loss} | {inv} | {p50} | {verdict} |".format(
                name=c["name"],
                size=f"{c['size_mb']:.2f}" if c["size_mb"] is not None else "-",
                value=f"{metric['value']:.4f}" if metric else "-",
                loss=f"{metric['loss']:.4f}" if metric else "-",
                inv=_yes_no(c["invariance"]),
                p50=f"{c['latency_ms']['p50_ms']:.3f}" if c["latency_ms"] else "-",
                verdict="**chosen**"
                if c["name"] == document["chosen"]
                else ("accepted" if c["accepted"] else "; ".join(c["reasons"])),
            )
        )
    if document["budgets"]:
        lines += ["", "## Budgets", ""]
        lines += [f"- {b['description']}" for b in document["budgets"]]
    if document["warnings"]:
        lines += ["", "## Warnings", ""]
        lines += [f"- {w}" for w in document["warnings"]]
    return "\n".join(lines) + "\n"


def render_chart(document: dict[str, Any], path: Path) -> None:
    """Bars of size, latency and throughput before/after, as a PNG (matplotlib, Agg)."""
    require("matplotlib", "the report chart")
    figure_module = require("matplotlib.figure", "the report chart")
    agg = require("matplotlib.backends.backend_agg", "the report chart")
    base, opt = document["baseline"], document["optimized"]
    labels = ["FP32", "INT8"] if opt else ["FP32"]
    models = [base, opt] if opt else [base]
    figure = figure_module.Figure(figsize=(11, 3.4), dpi=100)
    agg.FigureCanvasAgg(figure)
    axes = figure.subplots(1, 3)
    colors = ["#8c8c8c", "#2a7ab9"]
    panels = [
        ("size (MB)", [m["size_mb"] for m in models]),
        ("single request p50 (ms)", [m["latency_ms"]["p50_ms"] for m in models]),
        (
            f"throughput, batch {base['throughput']['batch_size']} (samples/s)",
            [m["throughput"]["samples_per_s"] for m in models],
        ),
    ]
    for ax, (title, values) in zip(axes, panels, strict=True):
        bars = ax.bar(labels, values, color=colors[: len(values)])
        ax.bar_label(bars, fmt="%.3g")
        ax.set_title(title, fontsize=10)
        ax.margins(y=0.2)
    if opt is not None and opt["latency_ms"]:
        axes[1].errorbar(
            labels,
            [m["latency_ms"]["p50_ms"] for m in models],
            yerr=[[0, 0], [m["latency_ms"]["p95_ms"] - m["latency_ms"]["p50_ms"] for m in models]],
            fmt="none",
            ecolor="black",
            capsize=4,
            label="p95",
        )
        axes[1].legend(fontsize=8)
    figure.suptitle(
        f"{Path(base['path']).name}: {document['chosen'] or 'no candidate fits'}", fontsize=11
    )
    figure.tight_layout()
    figure.savefig(str(path), format="png", metadata={"Software": None})


def write_report(
    report: OptimizeReport, directory: Path, stem: str = "optimize-report"
) -> ReportFiles:
    """Write ``<stem>.json``, ``<stem>.md`` and ``<stem>.png`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    document = report.to_dict()
    files = ReportFiles(
        json=directory / f"{stem}.json",
        markdown=directory / f"{stem}.md",
        chart=directory / f"{stem}.png",
    )
    files.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    files.markdown.write_text(render_markdown(document), encoding="utf-8")
    render_chart(document, files.chart)
    return files
