"""The Markdown of an optimize report, rendered from its JSON document alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["render_markdown"]


def _speed(change: dict[str, Any], figure: str) -> str:
    """``2.75x faster (rounds 2.6-2.9x)``, or no measurable difference, from the claims."""
    if not change:
        return "-"
    claim = change["claims"][figure]
    low, high = claim["interval"]
    interval = f"rounds {low:.2f}-{high:.2f}x"
    if claim["verdict"] == "no measurable difference":
        return f"no measurable difference ({claim['ratio']:.2f}x; {interval})"
    ratio = claim["ratio"] if claim["ratio"] >= 1 else 1 / claim["ratio"]
    return f"**{ratio:.2f}x {claim['verdict']}** ({interval})"


def _yes_no(invariance: dict[str, Any] | None) -> str:
    if invariance is None:
        return "-"
    verdict = "yes" if invariance["invariant"] else "**no**"
    return f"{verdict} ({invariance['worst_relative']:.2g})"


def _value(value: float | None, metric: str = "", detail: dict[str, Any] | None = None) -> str:
    if value is None:
        return "-"
    text = f"{value:.4f}"
    if metric == "cosine" and detail and detail.get("min") is not None:
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
        _speed(change, "p50"),
    )
    row(
        "single request p95 (ms)",
        f"{base['latency_ms']['p95_ms']:.3f}",
        opt_value(".3f", "latency_ms", "p95_ms"),
        _speed(change, "p95"),
    )
    row(
        f"throughput, batch {batch} (samples/s)",
        f"{base['throughput']['samples_per_s']:.0f}",
        opt_value(".0f", "throughput", "samples_per_s"),
        _speed(change, "throughput"),
    )
    several = len(acc["outputs"]) > 1
    for output in acc["outputs"]:
        loss = output["loss"]
        versus = "labels" if output["metric"] == "accuracy" else "FP32"
        row(
            (f"`{output['output']}`: " if several else "") + f"{output['metric']} vs {versus}",
            _value(output["fp32"]),
            _value(output["optimized"], output["metric"], output["detail"]),
            (
                f"loss {loss:.4f}"
                + (f" (max {output['max_loss']:g})" if output["max_loss"] is not None else "")
                + ("" if output["passed"] in (True, None) else " **EXCEEDED**")
            )
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
        *_metric_lines(acc),
        *_quantization_lines(document),
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
                value=_number(metric["value"]) if metric else "-",
                loss=_number(metric["loss"]) if metric else "-",
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


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _metric_lines(acc: dict[str, Any]) -> list[str]:
    if len(acc["outputs"]) == 1:
        return [f"Metric: `{acc['metric']}`. Why: {acc['why']}.", ""]
    lines = ["Every output is judged; a candidate passes only when all do:", ""]
    lines += [f"- `{o['output']}`: `{o['metric']}`. Why: {o['why']}." for o in acc["outputs"]]
    return [*lines, ""]


def _quantization_lines(document: dict[str, Any]) -> list[str]:
    lines = []
    quantization = document["quantization"]
    if quantization is not None:
        share = f"{quantization['weights_int8_share']:.0%} of the weights are INT8"
        floats = quantization["float_op_types"]
        if floats:
            share += "; left float: " + ", ".join(f"{op} ({n})" for op, n in floats.items())
        if quantization["essentially_fp32"]:
            share = "**Essentially FP32**: " + share
        lines += [f"Quantization: {share}.", ""]
    tolerance = document["selftest_tolerance"]
    if tolerance is not None:
        lines += [
            f"Self-test: with expectations taken from FP32, give each `test_data.json` case "
            f'`"tolerance": {{"atol": {tolerance["atol"]:g}}}` (INT8 differs from FP32 by up '
            f"to {tolerance['max_abs_diff_fp32']:.3g} alone and moves by up to "
            f"{tolerance['max_abs_batch_deviation']:.3g} in a batch).",
            "",
        ]
    return lines


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
