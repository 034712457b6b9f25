"""The PNG of an optimize report: size, latency, throughput and accuracy, FP32 beside INT8."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from servinglib.optimize._deps import require

__all__ = ["render_chart"]

_COLORS = ["#8c8c8c", "#2a7ab9"]


def render_chart(document: dict[str, Any], path: Path) -> None:
    """Four panels rendered from the JSON document (matplotlib, Agg, no display needed).

    Latency shows p50 and p95 as bars side by side, each labelled above itself, so no
    whisker ever covers a label.
    """
    require("matplotlib", "the report chart")
    figure_module = require("matplotlib.figure", "the report chart")
    agg = require("matplotlib.backends.backend_agg", "the report chart")
    base, opt, accuracy = document["baseline"], document["optimized"], document["accuracy"]
    labels = ["FP32", "INT8"] if opt else ["FP32"]
    models = [base, opt] if opt else [base]
    figure = figure_module.Figure(figsize=(14, 3.6), dpi=100)
    agg.FigureCanvasAgg(figure)
    size_ax, latency_ax, throughput_ax, accuracy_ax = figure.subplots(1, 4)
    _bars(size_ax, "size (MB)", labels, [m["size_mb"] for m in models])
    _latency(latency_ax, labels, models)
    _bars(
        throughput_ax,
        f"throughput, batch {base['throughput']['batch_size']} (samples/s)",
        labels,
        [m["throughput"]["samples_per_s"] for m in models],
        fmt="{:,.0f}",  # 295,831 rather than 2.96e+05
    )
    values = [accuracy["fp32"]] + ([accuracy["optimized"]] if opt else [])
    title = f"{accuracy['metric']} vs {'labels' if accuracy['metric'] == 'accuracy' else 'FP32'}"
    if len(accuracy["outputs"]) > 1:
        title = f"closest to its budget of {len(accuracy['outputs'])} outputs:\n" + title
    if accuracy["loss"] is not None:
        title += f"\nloss {accuracy['loss']:.4g}"
        if accuracy["max_loss"] is not None:
            title += f" (max {accuracy['max_loss']:g})"
    _bars(accuracy_ax, title, labels, [v if v is not None else 0.0 for v in values], fmt="%.4g")
    figure.suptitle(
        f"{Path(base['path']).name}: {document['chosen'] or 'no candidate fits'}", fontsize=11
    )
    figure.tight_layout()
    figure.savefig(str(path), format="png", metadata={"Software": None})


def _bars(ax: Any, title: str, labels: list[str], values: list[float], fmt: str = "%.3g") -> None:
    bars = ax.bar(labels, values, color=_COLORS[: len(values)])
    ax.bar_label(bars, fmt=fmt, padding=2)
    ax.set_title(title, fontsize=10)
    ax.margins(y=0.25)


def _latency(ax: Any, labels: list[str], models: list[dict[str, Any]]) -> None:
    positions = np.arange(len(models))
    width = 0.38
    p50 = [m["latency_ms"]["p50_ms"] for m in models]
    p95 = [m["latency_ms"]["p95_ms"] for m in models]
    low = ax.bar(positions - width / 2, p50, width, color=_COLORS[: len(models)])
    high = ax.bar(
        positions + width / 2,
        p95,
        width,
        color=_COLORS[: len(models)],
        alpha=0.45,
        hatch="//",
    )
    ax.bar_label(low, fmt="%.3g", padding=2, fontsize=8)
    ax.bar_label(high, fmt="%.3g", padding=2, fontsize=8)
    ax.set_xticks(positions, labels)
    # named in the title rather than a legend, which would sit on a bar
    ax.set_title("single request latency (ms)\np50 solid, p95 hatched", fontsize=10)
    ax.margins(y=0.25)
