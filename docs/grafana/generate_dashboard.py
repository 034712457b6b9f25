"""Generate the Grafana dashboard ``docs/grafana/servinglib.json``.

The panels and their PromQL are declared in ``panels.py``, on the metric names of
:data:`servinglib.monitoring.metrics.METRIC_SPECS`; this script lays them out and writes
Grafana's JSON. Generation fails when a declared metric has no panel, so a new metric
cannot be left off the dashboard::

    python docs/grafana/generate_dashboard.py           # rewrite the dashboard
    python docs/grafana/generate_dashboard.py --check   # exit 1 if the committed file is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from panels import MODEL_SELECTOR, Panel, Query, Section, check_coverage, name, sections

from servinglib.monitoring.drift import DRIFT_GAUGES

__all__ = ["DASHBOARD_PATH", "build_dashboard", "main", "render_dashboard"]

DASHBOARD_PATH = Path(__file__).resolve().parent / "servinglib.json"
SCHEMA_VERSION = 39
GRID_WIDTH = 24

_DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}


def _target(query: Query, ref_id: str) -> dict[str, Any]:
    """The Grafana target object of ``query``."""
    target: dict[str, Any] = {
        "datasource": _DATASOURCE,
        "editorMode": "code",
        "expr": query.expr,
        "legendFormat": query.legend or "__auto",
        "range": not query.table,
        "instant": query.table,
        "refId": ref_id,
    }
    if query.table:
        target["format"] = "table"
    elif query.heatmap:
        target["format"] = "heatmap"
    return target


def _timeseries_config(unit: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "unit": unit,
        "custom": {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10,
            "showPoints": "never",
            "spanNulls": False,
        },
    }
    defaults.update(extra)
    return {"defaults": defaults, "overrides": []}


def _timeseries_options() -> dict[str, Any]:
    return {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True, "calcs": []},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    extra = dict(panel.field_config)
    overrides = extra.pop("overrides", [])
    if panel.kind == "timeseries":
        field_config = _timeseries_config(panel.unit, extra)
        options: dict[str, Any] = _timeseries_options()
    else:
        field_config = {"defaults": {"unit": panel.unit, **extra}, "overrides": []}
        options = {}
    field_config["overrides"] = overrides
    options.update(panel.options)
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    out: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description(),
        "datasource": _DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": field_config,
        "options": options,
        "targets": [_target(query, letters[i]) for i, query in enumerate(panel.queries)],
    }
    if panel.transformations:
        out["transformations"] = [dict(t) for t in panel.transformations]
    if panel.repeat:
        out.update(repeat=panel.repeat, repeatDirection="h", maxPerRow=2)
    return out


def _layout(sections: Sequence[Section]) -> list[dict[str, Any]]:
    """Rows and panels, left to right and top to bottom, with sequential ids."""
    panels: list[dict[str, Any]] = []
    y = 0
    panel_id = 1
    for section in sections:
        panels.append(
            {
                "id": panel_id,
                "type": "row",
                "title": section.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y},
                "panels": [],
            }
        )
        panel_id += 1
        y += 1
        x = row_height = 0
        for panel in section.panels:
            if x + panel.width > GRID_WIDTH:
                x, y, row_height = 0, y + row_height, 0
            panels.append(_panel_json(panel, panel_id, x, y))
            panel_id += 1
            x += panel.width
            row_height = max(row_height, panel.height)
        y += row_height
    return panels


def _variables() -> list[dict[str, Any]]:
    models = f"label_values({name('requests')}, model)"
    outputs = f"label_values({DRIFT_GAUGES[3][0]}{{{MODEL_SELECTOR}}}, output)"
    # what model code counts (Model.metrics): the series with a model label servinglib's
    # own names do not start
    model_metrics = f'label_values({{{MODEL_SELECTOR}, __name__!~"servinglib_.*"}}, __name__)'
    return [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
            "includeAll": False,
            "multi": False,
            "options": [],
            "refresh": 1,
            "regex": "",
        },
        {
            "name": "model",
            "label": "Model",
            "type": "query",
            "datasource": _DATASOURCE,
            "definition": models,
            "query": {"query": models, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
            "current": {},
            "hide": 0,
            "includeAll": True,
            "allValue": ".*",
            "multi": True,
            "options": [],
            "refresh": 2,
            "regex": "",
            "sort": 1,
        },
        {
            "name": "output",
            "label": "Output",
            "description": "The profiled output shown by the output distribution panel.",
            "type": "query",
            "datasource": _DATASOURCE,
            "definition": outputs,
            "query": {"query": outputs, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
            "current": {},
            "hide": 0,
            "includeAll": False,
            "multi": False,
            "options": [],
            "refresh": 2,
            "regex": "",
            "sort": 1,
        },
        {
            "name": "model_metric",
            "label": "Model metric",
            "description": "Metrics of the model code (Model.metrics): counters and "
            "histogram counts, each shown in its own panel of 'Model metrics'.",
            "type": "query",
            "datasource": _DATASOURCE,
            "definition": model_metrics,
            "query": {
                "query": model_metrics,
                "refId": "PrometheusVariableQueryEditor-VariableQuery",
            },
            "current": {},
            "hide": 0,
            "includeAll": True,
            "multi": True,
            "options": [],
            "refresh": 2,
            "regex": "/.*_(total|count)$/",
            "sort": 1,
        },
    ]


def build_dashboard() -> dict[str, Any]:
    """The dashboard as a JSON-ready dict.

    Raises:
        ValueError: a metric of METRIC_SPECS has no panel.
    """
    declared = sections()
    check_coverage(declared)
    return {
        "title": "servinglib",
        "uid": "servinglib",
        "description": "Requests, latency, model versions, drift, shadow traffic and the "
        "prediction log of servinglib services. Generated by "
        "docs/grafana/generate_dashboard.py.",
        "tags": ["servinglib", "ml-serving"],
        "id": None,
        "version": 1,
        "schemaVersion": SCHEMA_VERSION,
        "editable": True,
        "graphTooltip": 1,
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "weekStart": "",
        "links": [],
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "templating": {"list": _variables()},
        "panels": _layout(declared),
    }


def render_dashboard() -> str:
    """The dashboard file's text: stable key order, two-space indent, trailing newline."""
    return json.dumps(build_dashboard(), indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the dashboard, or with ``--check`` report a stale one; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when the committed dashboard differs from the generated one",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=DASHBOARD_PATH,
        help="where the dashboard goes (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    path: Path = args.output
    text = render_dashboard()
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    if current == text:
        return 0
    if args.check:
        print(
            f"{path} is stale; regenerate it with: python docs/grafana/generate_dashboard.py",
            file=sys.stderr,
        )
        return 1
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
