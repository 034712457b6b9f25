"""The HTML of ``/status``: server-rendered, one inline stylesheet and script, no CDN.

The page is a ``<main>`` of one ``<section>`` per model, each with a table of its versions;
the script fetches ``/status?fragment=1`` every few seconds and swaps the ``<main>`` in
(the Pause button stops it). Sparklines are inline SVG with a text alternative.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

__all__ = ["render_fragment", "render_page"]

REFRESH_S = 5

_STYLE = """
:root{color-scheme:light dark;--ok:#1a7f37;--bad:#c62828;--muted:#6b6b6b}
body{font-family:system-ui,sans-serif;margin:0 auto;padding:.75rem;max-width:72rem;line-height:1.4}
header{display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:baseline}
h1{font-size:1.4rem;margin:.2rem 0}h2{font-size:1.15rem;margin:1.2rem 0 .3rem}
.table-wrap{overflow-x:auto}table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #8884;padding:.3rem .5rem;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.state-READY{color:var(--ok);font-weight:600}.state-FAILED{color:var(--bad);font-weight:600}
.reason{color:var(--bad);margin:.2rem 0 0;font-size:.9rem;overflow-wrap:anywhere}
.muted{color:var(--muted)}svg.spark{vertical-align:middle}
button{font:inherit;padding:.2rem .7rem}button:focus-visible{outline:3px solid #2a7ab9}
"""

_SCRIPT = """
(function () {
  var main = document.getElementById("status");
  var note = document.getElementById("refresh-note");
  var pause = document.getElementById("pause");
  var paused = false;
  pause.addEventListener("click", function () {
    paused = !paused;
    pause.setAttribute("aria-pressed", String(paused));
    pause.textContent = paused ? "Resume" : "Pause";
  });
  function refresh() {
    if (paused) { return; }
    fetch("status?fragment=1", {cache: "no-store", headers: {"Accept": "text/html"}})
      .then(function (answer) {
        if (!answer.ok) { throw new Error("HTTP " + answer.status); }
        return answer.text();
      })
      .then(function (text) {
        main.innerHTML = text;
        note.textContent = "Updated " + new Date().toLocaleTimeString();
      })
      .catch(function (problem) {
        note.textContent = "Could not refresh (" + problem.message + "); retrying.";
      });
  }
  setInterval(refresh, REFRESH_MS);
})();
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _number(value: float | None, fmt: str, suffix: str = "") -> str:
    return "<span class='muted'>n/a</span>" if value is None else f"{value:{fmt}}{suffix}"


def _sparkline(values: Sequence[float], label: str) -> str:
    if len(values) < 2:
        return "<span class='muted'>not enough samples</span>"
    width, height = 100, 24
    top = max(values) or 1.0
    step = width / (len(values) - 1)
    points = " ".join(
        f"{i * step:.1f},{height - 2 - (v / top) * (height - 4):.1f}" for i, v in enumerate(values)
    )
    summary = f"{label}: from {values[0]:.3g} to {values[-1]:.3g}, highest {top:.3g}"
    return (
        f"<svg class='spark' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
        f"role='img' aria-label='{_e(summary)}'><title>{_e(summary)}</title>"
        f"<polyline fill='none' stroke='currentColor' stroke-width='1.5' points='{points}'/></svg>"
    )


def _version_row(model: str, v: dict[str, Any]) -> str:
    state = v["state"]
    reason = f"<p class='reason'>{_e(v['reason'])}</p>" if v["reason"] else ""
    tests = v["self_test"]
    if tests["cases"]:
        verdict = "passed" if tests["passed"] == tests["cases"] else "failed"
        self_test = f"{verdict} ({tests['passed']}/{tests['cases']})"
    else:
        self_test = "<span class='muted'>not run</span>"
    traffic = v["traffic"]
    error = traffic["error_ratio"]
    trend = _sparkline(traffic["rate_trend"], f"requests per second of {model} {v['version']}")
    drift = _number(v["drift_psi"], ".3f")
    if len(v["drift_trend"]) > 1:
        drift += " " + _sparkline(v["drift_trend"], f"largest PSI of {model} {v['version']}")
    return (
        f"<tr><th scope='row'>{_e(v['version'])}</th>"
        f"<td><span class='state-{_e(state)}'>{_e(state)}</span>{reason}</td>"
        f"<td>{self_test}</td>"
        f"<td class='num'>{_number(traffic['rate_per_s'], '.2f')}</td>"
        f"<td class='num'>{_number(None if error is None else error * 100, '.1f', ' %')}</td>"
        f"<td class='num'>{_number(traffic['p95_ms'], '.1f')}</td>"
        f"<td>{trend}</td><td class='num'>{drift}</td>"
        f"<td class='num'>{traffic['total_requests']}</td></tr>"
    )


def _model_section(index: int, model: dict[str, Any]) -> str:
    name = model["name"]
    split = model["traffic_split"]
    routing = (
        "traffic split " + ", ".join(f"version {_e(k)}: {v:g} %" for k, v in split.items())
        if split
        else f"every request that names no version goes to version {_e(model['default_version'])}"
    )
    shadows = "".join(
        f"<li>version {_e(s['shadow_version'])} shadows version {_e(s['primary_version'])}: "
        f"{_number(None if s['agreement'] is None else s['agreement'] * 100, '.1f', ' %')} "
        f"agreement over {s['comparisons']} comparisons</li>"
        for s in model["shadows"]
    )
    rows = "".join(_version_row(name, v) for v in model["versions"])
    heading = f"model-{index}"
    return (
        f"<section aria-labelledby='{heading}'><h2 id='{heading}'>{_e(name)}</h2>"
        f"<p>Default version {_e(model['default_version'])}; {routing}.</p>"
        + (f"<ul>{shadows}</ul>" if shadows else "")
        + "<div class='table-wrap'><table>"
        f"<caption class='muted'>Versions of {_e(name)}; traffic over the last minute</caption>"
        "<thead><tr><th scope='col'>Version</th><th scope='col'>State</th>"
        "<th scope='col'>Self-test</th><th scope='col'>Requests/s</th>"
        "<th scope='col'>Errors</th><th scope='col'>p95 ms</th>"
        "<th scope='col'>Requests/s trend</th><th scope='col'>Drift (largest PSI)</th>"
        f"<th scope='col'>Requests</th></tr></thead><tbody>{rows}</tbody></table></div>"
        "</section>"
    )


def render_fragment(status: dict[str, Any]) -> str:
    """The inside of ``<main>``: one section per model."""
    sections = "".join(_model_section(i, m) for i, m in enumerate(status["models"]))
    return sections or "<p>No models are configured.</p>"


def render_page(status: dict[str, Any], refresh_s: int = REFRESH_S) -> str:
    """The whole page, refreshing its ``<main>`` every ``refresh_s`` seconds."""
    service = _e(status["service"])
    script = _SCRIPT.replace("REFRESH_MS", str(refresh_s * 1000))
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        # an empty icon: the browser asks for /favicon.ico otherwise (a 404 in its console)
        "<link rel='icon' href='data:,'>"
        f"<title>{service}: servinglib status</title><style>{_STYLE}</style></head><body>"
        f"<header><h1>{service}</h1><p id='refresh-note' role='status' aria-live='polite'>"
        f"Refreshes every {refresh_s} s.</p>"
        "<button type='button' id='pause' aria-pressed='false'>Pause</button></header>"
        f"<main id='status'>{render_fragment(status)}</main>"
        "<footer class='muted'><p>Read-only. Machine-readable: <a href='status.json'>"
        "status.json</a>, <a href='models'>models</a>, <a href='metrics'>metrics</a>.</p>"
        f"</footer><script>{script}</script></body></html>\n"
    )
