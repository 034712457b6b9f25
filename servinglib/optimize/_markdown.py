"""The Markdown of an optimize report, rendered from its JSON document alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["render_markdown"]


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
        lines.append(
            f"Chosen: **{document['chosen']}** ({settings['mode']}; {document['choice_reason']})."
        )
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
        f"{-change['size_reduction_pct']:+.1f} %" if change else "-",
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
        _reproducibility(document),
        "",
        f"Metric: `{acc['metric']}`. Why: {acc['why']}.",
        "",
        "## Candidates",
        "",
        "| candidate | size (MB) | metric | loss | batch-invariant | p50 (ms) | verdict |"
        " latency comparison |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in document["candidates"]:
        metric = c["metric"]
        lines.append(
            "| {name} | {size} | {value} | {loss} | {inv} | {p50} | {verdict} | {cmp} |".format(
                name=c["name"],
                size=f"{c['size_mb']:.2f}" if c["size_mb"] is not None else "-",
                value=f"{metric['value']:.4f}" if metric else "-",
                loss=f"{metric['loss']:.4f}" if metric else "-",
                inv=_yes_no(c["invariance"]),
                p50=f"{c['latency_ms']['p50_ms']:.3f}" if c["latency_ms"] else "-",
                verdict="**chosen**"
                if c["name"] == document["chosen"]
                else ("accepted" if c["accepted"] else "; ".join(c["reasons"])),
                cmp=c.get("comparison") or "-",
            )
        )
    if document["budgets"]:
        lines += ["", "## Budgets", ""]
        lines += [f"- {b['description']}" for b in document["budgets"]]
    if document["warnings"]:
        lines += ["", "## Warnings", ""]
        lines += [f"- {w}" for w in document["warnings"]]
    return "\n".join(lines) + "\n"


def _reproducibility(document: dict[str, Any]) -> str:
    """How far each latency figure moved between rounds, so a reader can judge it."""
    parts = []
    for label, figures in (("FP32", document["baseline"]), ("INT8", document["optimized"])):
        if figures is None:
            continue
        latency, throughput = figures["latency_ms"], figures["throughput"]
        rounds = ", ".join(f"{r:.3f}" for r in latency["rounds_p50_ms"])
        parts.append(
            f"{label} p50 per round (ms): {rounds} (spread {latency['round_spread']:.0%}; "
            f"throughput spread {throughput['round_spread']:.0%})"
        )
    return "Reproducibility: " + "; ".join(parts) + "."
