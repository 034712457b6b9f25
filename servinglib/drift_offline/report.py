"""``servinglib drift report``: drift of logged answers against the profile, as HTML and PNGs."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from servinglib.config.spec import load_config
from servinglib.monitoring.drift.profile import Profile, ProfileError, WindowSpec
from servinglib.monitoring.drift.sources import read_prediction_log
from servinglib.monitoring.drift.version import VersionMonitor

__all__ = ["write_drift_report"]


def write_drift_report(
    config_path: str | Path, model: str, version: str | None, since_s: float, out: Path
) -> dict[str, Any]:
    """Score the logged answers of the last ``since_s`` seconds; write ``out/index.html``.

    One PNG per drifted field shows the reference and live shares per bin.

    Raises:
        ProfileError: no prediction log, or the version has no profile.
    """
    from servinglib.lifecycle.registry import ModelRegistry

    config = load_config(config_path)
    log_url = config.prediction_log.read_url() if config.prediction_log else None
    if log_url is None:
        raise ProfileError(
            f"{config_path}: no monitoring.prediction_log url or parquet sink to report on"
        )
    registry = ModelRegistry(config)
    record = registry.record(model, version)
    profile_path = record.path / "profile.json"
    if not profile_path.is_file():
        raise ProfileError(
            f"model {model!r} version {record.version!r} has no {profile_path}; build it with "
            f"`servinglib profile --model {model} --version {record.version} --data FILE`"
        )
    profile = Profile.load(profile_path)
    whole = replace(profile, window=WindowSpec(seconds=since_s + 1, slots=1))
    monitor = VersionMonitor(model, record.version, whole, None, clock=lambda: 0.0)
    for _, features, output in read_prediction_log(log_url, model, record.version, since_s):
        monitor.observe(features, output)
    result = monitor.report()
    result["window"] = {"since_seconds": since_s}
    out.mkdir(parents=True, exist_ok=True)
    charts = {f["name"]: _chart(f, out) for f in result["fields"] if f["drifted"]}
    (out / "drift.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (out / "index.html").write_text(_html(result, charts), encoding="utf-8")
    return result


def _labels(field: dict[str, Any]) -> list[str]:
    bins = field["bins"]
    if bins["categories"] or field["kind"] in ("categorical", "top_class"):
        return [*bins["categories"], "other"]
    edges = bins["edges"]
    bounds = ["-inf", *(f"{e:.3g}" for e in edges), "+inf"]
    return [f"{lo}..{hi}" for lo, hi in itertools.pairwise(bounds)]


def _chart(field: dict[str, Any], out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    live = field["bins"]["live"]
    total = sum(live) or 1
    labels = _labels(field)
    positions = range(len(labels))
    figure, axes = plt.subplots(figsize=(8, 3.5))
    axes.bar([p - 0.2 for p in positions], field["bins"]["reference"], 0.4, label="reference")
    axes.bar([p + 0.2 for p in positions], [c / total for c in live], 0.4, label="live")
    axes.set_xticks(list(positions), labels, rotation=45, ha="right", fontsize=7)
    axes.set_ylabel("share")
    axes.set_title(f"{field['role']} {field['name']}: PSI {field['psi']:.3f}")
    axes.legend()
    figure.tight_layout()
    name = f"{field['role']}-{field['name']}.png".replace("/", "_")
    figure.savefig(out / name, dpi=90)
    plt.close(figure)
    return name


_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{{ title }}</title></head>
<body><h1>{{ title }}</h1>
<p>{{ result.requests }} logged answers in the last {{ "%g" | format(since) }} s; PSI above
{{ result.drift_threshold }} counts as drifted.</p>
<table border="1"><tr><th>role</th><th>field</th><th>kind</th><th>samples</th><th>PSI</th>
<th>JS distance</th><th></th><th>data quality</th></tr>
{% for field in result.fields %}<tr><td>{{ field.role }}</td><td>{{ field.name }}</td>
<td>{{ field.kind }}</td><td>{{ field.samples }}</td>
<td>{{ "-" if field.psi is none else "%.4f" | format(field.psi) }}</td>
<td>{{ "-" if field.js_distance is none else "%.4f" | format(field.js_distance) }}</td>
<td>{{ "DRIFTED" if field.drifted else "" }}</td>
<td>{{ quality(field) }}</td></tr>
{% endfor %}</table>
{% for name, src in charts.items() %}<h3>{{ name }}</h3><img src="{{ src }}" alt="{{ name }}">
{% endfor %}</body></html>
"""


def _quality(field: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in field["quality"].items() if v) or "-"


def _html(result: dict[str, Any], charts: dict[str, str]) -> str:
    """The report page; every value is escaped (Jinja2 autoescape), field names included."""
    import jinja2

    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    page = environment.from_string(_PAGE)
    return page.render(
        title=f"Drift of {result['model']} version {result['version']}",
        result=result,
        since=result["window"]["since_seconds"],
        charts=charts,
        quality=_quality,
    )
