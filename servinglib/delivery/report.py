"""``servinglib rollout report``: the readout of a rollout, from its persisted evidence.

It reads the state and evidence files the controller wrote (no server needed), runs every
gate again on each persisted window and checks it reaches the verdict the controller
recorded, then writes ``rollout.json`` and ``index.html`` with one PNG per gate: the
baseline and the candidate over time, the steps, and each decision with its reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servinglib.config.rollout_policy import RolloutPolicy
from servinglib.config.spec import load_config
from servinglib.delivery.evidence import Counts
from servinglib.delivery.gates import evaluate_gates
from servinglib.errors import ServinglibError
from servinglib.lifecycle.rollout_state import load_state, read_evidence

__all__ = ["replay", "write_rollout_report"]

_UNITS = {
    "error_rate": ("error rate (%)", 100.0),
    "latency": ("latency (ms)", 1000.0),
    "shadow_agreement": ("agreement (%)", 100.0),
    "drift": ("PSI of the worst field", 1.0),
}


def replay(policy: RolloutPolicy, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The gates' verdicts on one persisted evaluation, computed again."""
    step = policy.steps[entry["step"]]
    bounds = [float(b) for b in entry["bounds"]]
    results = evaluate_gates(
        policy,
        step,
        Counts.from_json(entry["baseline"]),
        Counts.from_json(entry["candidate"]),
        Counts.from_json(entry["shadow"]),
        bounds,
        entry.get("look", True),
        entry.get("external", {}),
    )
    return [r.to_json() for r in results]


def write_rollout_report(config_path: str | Path, model: str, out: Path) -> dict[str, Any]:
    """Write ``out/rollout.json`` and ``out/index.html`` (with a PNG per gate).

    Raises:
        ServinglibError: the model has no rollout policy, or its rollout has no state yet.
    """
    config = load_config(config_path)
    policy = next((m.rollout for m in config.models if m.name == model), None)
    if policy is None:
        raise ServinglibError(f"{config_path}: model {model!r} has no `rollout:` policy")
    state = load_state(policy.state_dir, model)
    if state is None:
        raise ServinglibError(
            f"no rollout state for {model!r} in {policy.state_dir}; has the server started it?"
        )
    evidence = read_evidence(policy.state_dir, model)
    mismatches = [
        {"t": e["t"], "recorded": e["gates"], "replayed": replayed}
        for e in evidence
        if (replayed := replay(policy, e)) != e["gates"]
    ]
    start = evidence[0]["t"] if evidence else state.step_started
    series = _series(evidence, start)
    document: dict[str, Any] = {
        "model": model,
        "candidate": state.candidate,
        "baseline": state.baseline,
        "status": state.status,
        "step": state.step,
        "steps": [vars(s) for s in policy.steps],
        "decisions": state.decisions,
        "evaluations": len(evidence),
        "reproduced": not mismatches,
        "mismatches": mismatches[:10],
        "final_gates": state.gates,
        "series": series,
    }
    out.mkdir(parents=True, exist_ok=True)
    charts = {gate: _chart(gate, points, document, start, out) for gate, points in series.items()}
    (out / "rollout.json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    (out / "index.html").write_text(_html(document, charts), encoding="utf-8")
    return document


def _series(evidence: list[dict[str, Any]], start: float) -> dict[str, dict[str, list[Any]]]:
    """Per gate: time, step, baseline and candidate values, p-value and verdict."""
    series: dict[str, dict[str, list[Any]]] = {}
    for entry in evidence:
        for gate in entry["gates"]:
            points = series.setdefault(
                gate["gate"],
                {
                    "t": [],
                    "step": [],
                    "baseline": [],
                    "candidate": [],
                    "p_value": [],
                    "verdict": [],
                },
            )
            points["t"].append(round(entry["t"] - start, 3))
            points["step"].append(entry["step"])
            for key in ("baseline", "candidate", "p_value", "verdict"):
                points[key].append(gate[key])
    return series


def _chart(
    gate: str, series: dict[str, list[Any]], document: dict[str, Any], start: float, out: Path
) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    label, scale = _UNITS.get(gate, (gate.split(":", 1)[-1], 1.0))
    figure, axes = plt.subplots(figsize=(8, 3.2))
    for role, style in (("baseline", "-"), ("candidate", "--")):
        values = [float("nan") if v is None else v * scale for v in series[role]]
        version = document[role]
        axes.plot(series["t"], values, style, marker=".", label=f"{role} ({version})")
    for decision in document["decisions"]:
        if decision["action"] in ("advance", "promote", "rollback", "abort"):
            at = decision["t"] - start
            color = "tab:red" if decision["action"] in ("rollback", "abort") else "tab:green"
            axes.axvline(at, color=color, linestyle=":")
            axes.annotate(
                decision["action"],
                (at, 1.0),
                xycoords=("data", "axes fraction"),
                fontsize=8,
                color=color,
            )
    axes.set_xlabel("seconds since the first evaluation")
    axes.set_ylabel(label)
    axes.set_title(f"{document['model']}: {gate}")
    axes.legend(fontsize=8)
    figure.tight_layout()
    name = f"gate-{gate}.png"
    figure.savefig(out / name, dpi=90)
    plt.close(figure)
    return name


_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{{ title }}</title></head>
<body><h1>{{ title }}</h1>
<p id="outcome">Outcome: <b>{{ d.status }}</b> at step {{ d.step }} of {{ d.steps | length }};
baseline {{ d.baseline }}, candidate {{ d.candidate }}; {{ d.evaluations }} evaluations.
{% if d.reproduced %}Every verdict reproduces from the persisted evidence.
{% else %}<b>{{ d.mismatches | length }} verdicts do not reproduce</b> (see rollout.json).
{% endif %}</p>
<h2>Decisions</h2>
<table border="1"><tr><th>t (s)</th><th>step</th><th>action</th><th>why</th></tr>
{% for x in d.decisions %}<tr><td>{{ "%.1f" | format(x.t - start) }}</td><td>{{ x.step }}</td>
<td>{{ x.action }}</td><td>{{ x.reason }}</td></tr>
{% endfor %}</table>
<h2>Gates at the last evaluation</h2>
<table border="1"><tr><th>gate</th><th>verdict</th><th>evidence</th></tr>
{% for g in d.final_gates %}<tr><td>{{ g.gate }}</td><td>{{ g.verdict }}</td>
<td>{{ g.reason }}</td></tr>
{% endfor %}</table>
{% for gate, src in charts.items() %}<h3>{{ gate }}</h3>
<img class="gate" src="{{ src }}" alt="{{ gate }}: baseline vs candidate over time">
{% endfor %}</body></html>
"""


def _html(document: dict[str, Any], charts: dict[str, str]) -> str:
    """The readout page; every value is escaped (Jinja2 autoescape)."""
    import jinja2

    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    decisions = document["decisions"]
    return environment.from_string(_PAGE).render(
        title=f"Rollout of {document['model']} version {document['candidate']}",
        d=document,
        charts=charts,
        start=decisions[0]["t"] if decisions else 0.0,
    )
