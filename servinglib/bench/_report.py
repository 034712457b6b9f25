"""The files of a run: ``run.json``, ``run.csv``, ``run.png`` and ``run.html``.

The PNG has two panels: latency (p50, p95, p99, with the rounds' spread) against
throughput, one point per level, and the latency distribution of each level. The HTML page
holds the table and the PNG inline (no other file, nothing fetched).
"""

from __future__ import annotations

import base64
import csv
import html
import json
from pathlib import Path
from typing import Any

from servinglib.optimize._deps import require

__all__ = ["write_report"]

_COLUMNS = ("level", "throughput_rps", "p50_ms", "p95_ms", "p99_ms", "mean_ms", "requests")
_SERVER = ("server_ms", "queue_ms", "compute_ms", "batch_size")


def write_report(document: dict[str, Any], out: Path) -> list[Path]:
    """Write the four files into ``out`` (created); return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"run.{ext}" for ext in ("json", "csv", "png", "html")]
    paths[0].write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    _csv(document, paths[1])
    _png(document, paths[2])
    paths[3].write_text(_html(document, paths[2].read_bytes()), encoding="utf-8")
    return paths


def _rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for level in document["levels"]:
        row = {k: level["median"].get(k) for k in _COLUMNS if k != "level"}
        row["level"] = level["level"]
        row.update({k: level["server"].get(k) for k in _SERVER})
        row["errors"] = " ".join(f"{k}:{v}" for k, v in level["median"]["errors"].items())
        rows.append(row)
    return rows


def _csv(document: dict[str, Any], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*_COLUMNS, *_SERVER, "errors"])
        writer.writeheader()
        writer.writerows(_rows(document))


def _png(document: dict[str, Any], path: Path) -> None:
    figure_module = require("matplotlib.figure", "the bench report")
    agg = require("matplotlib.backends.backend_agg", "the bench report")
    figure = figure_module.Figure(figsize=(11, 4), dpi=100)
    agg.FigureCanvasAgg(figure)
    curve_ax, dist_ax = figure.subplots(1, 2)
    levels = document["levels"]
    x = [lv["median"]["throughput_rps"] for lv in levels]
    for key, style in (("p50_ms", "o-"), ("p95_ms", "s--"), ("p99_ms", "^:")):
        y = [lv["median"][key] for lv in levels]
        low = [max(0.0, v - lv["spread"][key][0]) for v, lv in zip(y, levels, strict=True)]
        high = [max(0.0, lv["spread"][key][1] - v) for v, lv in zip(y, levels, strict=True)]
        curve_ax.errorbar(x, y, yerr=[low, high], fmt=style, capsize=3, label=key[:3])
    for lv, xv in zip(levels, x, strict=True):
        curve_ax.annotate(
            f"{lv['level']:g}",
            (xv, lv["median"]["p50_ms"]),
            fontsize=8,
            textcoords="offset points",
            xytext=(3, -10),
        )
    unit = "concurrency" if document["mode"] == "concurrency" else "offered rate"
    curve_ax.set_xlabel("throughput (answers/s)")
    curve_ax.set_ylabel("latency (ms)")
    curve_ax.set_title(f"latency vs throughput (points labelled by {unit})", fontsize=10)
    curve_ax.legend(fontsize=8)
    for lv in levels:
        curve = lv["rounds"][-1]["percentiles_ms"]
        if curve:
            dist_ax.plot(curve, range(len(curve)), label=f"{lv['level']:g}")
    dist_ax.set_xscale("log")
    dist_ax.set_xlabel("latency (ms, log scale)")
    dist_ax.set_ylabel("percentile")
    dist_ax.set_title(f"latency distribution by {unit} (last round)", fontsize=10)
    dist_ax.legend(fontsize=8, title=unit, title_fontsize=8)
    figure.suptitle(document["label"], fontsize=11)
    figure.tight_layout()
    figure.savefig(str(path), format="png", metadata={"Software": None})


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    return html.escape("" if value is None else str(value))


def _html(document: dict[str, Any], png: bytes) -> str:
    rows = _rows(document)
    header = "".join(f"<th scope='col'>{html.escape(c)}</th>" for c in rows[0]) if rows else ""
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row.values()) + "</tr>" for row in rows
    )
    options = html.escape(json.dumps(document["options"], indent=1))
    title = html.escape(document["label"])
    image = base64.b64encode(png).decode()
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{title}: servinglib bench</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:1rem}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:right}"
        "img{max-width:100%}</style></head><body>"
        f"<h1>{title}</h1><p>{html.escape(document['created'])}, {document['mode']} mode. "
        "Medians over rounds; server columns are means per request from /metrics.</p>"
        f"<img src='data:image/png;base64,{image}' alt='latency against throughput, and the "
        "latency distribution of each level'>"
        f"<table><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>"
        f"<h2>Options</h2><pre>{options}</pre></body></html>\n"
    )
