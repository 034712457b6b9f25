"""``servinglib bench --compare RUN.json``: two runs side by side, level by level."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servinglib.errors import ConfigError

__all__ = ["compare_runs", "load_run"]

_FIGURES = ("throughput_rps", "p50_ms", "p95_ms", "p99_ms")


def load_run(path: Path) -> dict[str, Any]:
    """A ``run.json`` written by ``servinglib bench``."""
    try:
        document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"--compare {path}: {e}; pass a run.json of servinglib bench") from e
    if not isinstance(document, dict) or "servinglib_bench" not in document:
        raise ConfigError(f"--compare {path}: not a run.json written by servinglib bench")
    return document


def compare_runs(base: dict[str, Any], new: dict[str, Any]) -> str:
    """A table of the levels both runs measured: each figure of both, and new / base."""
    base_levels = {lv["level"]: lv["median"] for lv in base["levels"]}
    lines = [
        f"base: {base['label']} ({base['created']})",
        f"new:  {new['label']} ({new['created']})",
        f"{new['mode']:>12} | " + " | ".join(f"{f:>26}" for f in _FIGURES),
        f"{'':>12} | " + " | ".join(f"{'base':>8} {'new':>8} {'ratio':>8}" for _ in _FIGURES),
    ]
    shared = 0
    for level in new["levels"]:
        old = base_levels.get(level["level"])
        if old is None or base["mode"] != new["mode"]:
            continue
        shared += 1
        cells = []
        for figure in _FIGURES:
            a, b = old[figure], level["median"][figure]
            ratio = f"{b / a:.3f}" if a else "n/a"
            cells.append(f"{a:>8.2f} {b:>8.2f} {ratio:>8}")
        lines.append(f"{level['level']:>12g} | " + " | ".join(cells))
    if not shared:
        lines.append("no level measured by both runs (same mode and level); nothing to compare")
    lines.append("ratio = new / base: above 1 is more throughput, or more latency")
    return "\n".join(lines)
