"""``servinglib bench sweep``: serve a grid of settings, load each, keep the best under a
p95 budget (like Triton's model_analyzer) and write its settings as a config snippet.

Model settings (``max_batch_size``, ``max_queue_delay_us``, ``instances``,
``intra_op_threads``) go into a copy of the config written beside it (its relative paths
stay right) and removed after; ``workers`` goes in as ``SERVINGLIB_WORKERS``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from servinglib.bench._run import BenchOptions, run_bench
from servinglib.bench._server import started_server
from servinglib.errors import ConfigError

__all__ = ["SETTINGS", "best_under_budget", "parse_grid", "run_sweep", "snippet"]

SETTINGS = ("max_batch_size", "max_queue_delay_us", "instances", "workers", "intra_op_threads")


def parse_grid(items: Sequence[str]) -> dict[str, list[int]]:
    """``["max_batch_size=1,8", "workers=1,2"]`` -> ``{"max_batch_size": [1, 8], ...}``."""
    grid: dict[str, list[int]] = {}
    for item in items:
        name, _, values = item.partition("=")
        if name not in SETTINGS or not values:
            raise ConfigError(f"--grid {item!r}: expected NAME=V1,V2 with NAME one of {SETTINGS}")
        try:
            grid[name] = [int(v) for v in values.split(",")]
        except ValueError as e:
            raise ConfigError(f"--grid {item!r}: values must be integers") from e
    if not grid:
        raise ConfigError(f"sweep needs at least one --grid NAME=V1,V2 (NAME one of {SETTINGS})")
    return grid


def _model_entry(config: dict[str, Any], model: str) -> dict[str, Any]:
    for entry in config.get("models", []):
        if entry.get("name") == model:
            found: dict[str, Any] = entry
            return found
    raise ConfigError(f"no model {model!r} in the config")


def _apply(config: dict[str, Any], model: str, point: Mapping[str, int]) -> dict[str, Any]:
    copy: dict[str, Any] = yaml.safe_load(yaml.safe_dump(config))
    entry = _model_entry(copy, model)
    for name in ("max_batch_size", "max_queue_delay_us"):
        if name in point:
            entry.setdefault("batching", {})[name] = point[name]
    if "instances" in point:
        entry["instances"] = point["instances"]
    if "intra_op_threads" in point:
        entry.setdefault("runtime_options", {})["intra_op_threads"] = point["intra_op_threads"]
    return copy


def best_under_budget(
    points: Sequence[dict[str, Any]], p95_budget_ms: float
) -> dict[str, Any] | None:
    """The point with the most throughput whose p95 is within budget and had no errors."""
    fitting = [p for p in points if p["p95_ms"] <= p95_budget_ms and not p["errors"]]
    return max(fitting, key=lambda p: p["throughput_rps"], default=None)


def snippet(model: str, settings: Mapping[str, int]) -> str:
    """The winning settings as servinglib.yaml text."""
    entry: dict[str, Any] = {"name": model}
    batching = {k: settings[k] for k in ("max_batch_size", "max_queue_delay_us") if k in settings}
    if batching:
        entry["batching"] = batching
    if "instances" in settings:
        entry["instances"] = settings["instances"]
    if "intra_op_threads" in settings:
        entry["runtime_options"] = {"intra_op_threads": settings["intra_op_threads"]}
    document: dict[str, Any] = {"models": [entry]}
    if "workers" in settings:
        document = {"server": {"workers": settings["workers"]}, **document}
    return yaml.safe_dump(document, sort_keys=False)


def run_sweep(
    config_path: Path,
    options: BenchOptions,
    grid: Mapping[str, Sequence[int]],
    p95_budget_ms: float,
    print_line: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Serve and load every point of ``grid``; return the points and the best one."""
    original = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    _model_entry(original, options.model)
    names = list(grid)
    points = []
    for index, values in enumerate(itertools.product(*(grid[n] for n in names))):
        point = dict(zip(names, values, strict=True))
        variant = config_path.with_name(f".{config_path.stem}.sweep-{os.getpid()}-{index}.yaml")
        variant.write_text(yaml.safe_dump(_apply(original, options.model, point)))
        env = {"SERVINGLIB_WORKERS": str(point["workers"])} if "workers" in point else {}
        try:
            with started_server(variant, env, grpc=options.protocol == "grpc") as server:
                run = run_bench(
                    replace(
                        options,
                        url=server.url,
                        grpc_address=server.grpc_address,
                        config=str(variant),
                        label=f"{options.model} {point}",
                        settings=point,
                    ),
                    print_line,
                )
        finally:
            variant.unlink(missing_ok=True)
        fitting = [
            lv
            for lv in run["levels"]
            if lv["median"]["p95_ms"] <= p95_budget_ms and not lv["median"]["errors"]
        ]
        best_level = max(fitting or run["levels"], key=lambda lv: lv["median"]["throughput_rps"])
        median = best_level["median"]
        points.append(
            {
                "settings": point,
                "level": best_level["level"],
                "throughput_rps": median["throughput_rps"],
                "p95_ms": median["p95_ms"],
                "errors": median["errors"],
                "run": run,
            }
        )
    best = best_under_budget(points, p95_budget_ms)
    return {"p95_budget_ms": p95_budget_ms, "points": points, "best": best}
