"""The pruning report: ``prune-report.json`` and the curve ``prune-curve.png``.

The JSON lists every candidate (ratio 0 is the unpruned model) with parameters, MACs, size,
p50/p95 at batch 1, throughput at the measured batch size, the metric and its loss, and the
speed claims against the unpruned model; then the chosen ratio and the failures. The PNG
plots metric, size and p50 over the ratios, the chosen point circled.

Example::

    json_path, png_path = write_prune_report(outcome, Path("reports/prune"), settings)
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from servinglib.optimize._deps import require
from servinglib.optimize.candidates import Candidate
from servinglib.optimize.measure import cpu_info
from servinglib.optimize.prune import PruneOutcome, PruneSettings

__all__ = ["prune_document", "write_prune_report"]


def _candidate(c: Candidate, base: Candidate) -> dict[str, Any]:
    return {
        "ratio": c.ratio,
        "file": c.path.name,
        "params": c.params,
        "macs": c.macs,
        "macs_reduction": 1 - c.macs / base.macs if base.macs else 0.0,
        "size_mb": c.size_mb,
        "metric_value": c.value,
        "loss": c.loss,
        "p50_ms": c.latency.p50_ms if c.latency else None,
        "p95_ms": c.latency.p95_ms if c.latency else None,
        "rounds_p50_ms": list(c.latency.rounds_p50_ms) if c.latency else [],
        "throughput_batch_size": c.throughput.batch_size if c.throughput else None,
        "samples_per_s": c.throughput.samples_per_s if c.throughput else None,
        "p50_vs_unpruned": c.p50_claim.describe() if c.p50_claim else None,
        "throughput_vs_unpruned": c.throughput_claim.describe() if c.throughput_claim else None,
    }


def prune_document(outcome: PruneOutcome, settings: PruneSettings) -> dict[str, Any]:
    """The report as plain JSON-able data."""
    base = outcome.candidates[0]
    return {
        "kind": "prune",
        "machine": asdict(cpu_info()),
        "settings": {
            "ratios": list(settings.ratios),
            "importance": settings.importance,
            "structure": settings.structure,
            "epochs": settings.epochs,
            "lr": settings.lr,
            "max_loss": settings.max_loss,
            "max_size_mb": settings.max_size_mb,
            "max_latency_ms": settings.max_latency_ms,
            "threads": settings.measure.threads,
            "repeats": settings.measure.repeats,
            "iterations": settings.measure.iterations,
        },
        "metric": outcome.metric,
        "candidates": [_candidate(c, base) for c in outcome.candidates],
        "chosen_ratio": outcome.chosen.ratio if outcome.chosen else None,
        "passed": outcome.passed,
        "failures": list(outcome.failures),
    }


def write_prune_report(
    outcome: PruneOutcome, directory: Path, settings: PruneSettings
) -> tuple[Path, Path]:
    """Write the JSON and the PNG into ``directory``; returns both paths."""
    directory.mkdir(parents=True, exist_ok=True)
    document = prune_document(outcome, settings)
    json_path = directory / "prune-report.json"
    json_path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    png_path = directory / "prune-curve.png"
    _render(document, png_path)
    return json_path, png_path


def _render(document: dict[str, Any], path: Path) -> None:
    require("matplotlib", "the pruning curve")
    figure_module = require("matplotlib.figure", "the pruning curve")
    agg = require("matplotlib.backends.backend_agg", "the pruning curve")
    rows = document["candidates"]
    ratios = [r["ratio"] * 100 for r in rows]
    chosen = document["chosen_ratio"]
    figure = figure_module.Figure(figsize=(12, 3.4), dpi=100)
    agg.FigureCanvasAgg(figure)
    panels = zip(
        figure.subplots(1, 3),
        [f"{document['metric']}", "size (MB)", "p50 latency, batch 1 (ms)"],
        ["metric_value", "size_mb", "p50_ms"],
        strict=True,
    )
    for ax, title, key in panels:
        values = [r[key] if r[key] is not None else float("nan") for r in rows]
        ax.plot(ratios, values, marker="o", color="#2a7ab9")
        if chosen is not None:
            at = [r["ratio"] for r in rows].index(chosen)
            ax.plot([ratios[at]], [values[at]], marker="o", markersize=14, fillstyle="none")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(f"{document['settings']['structure']} removed (%)")
    verdict = f"chosen: {chosen:.0%}" if chosen is not None else "no ratio meets the budgets"
    figure.suptitle(f"structured pruning ({verdict})", fontsize=11)
    figure.tight_layout()
    figure.savefig(str(path), format="png", metadata={"Software": None})
