"""``servinglib optimize edge``: ORT format, profile budgets on an emulated host, a bundle."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from servinglib.optimize._cli_types import int_at_least, non_negative

__all__ = ["PROFILE_NAMES", "add_edge_parser", "report_edge", "run_edge"]

PROFILE_NAMES = ("rpi5", "rpi4")  # servinglib.optimize.edge.PROFILES (not imported: numpy)


def add_edge_parser(steps: Any) -> None:
    """Add ``edge`` to the ``optimize`` sub-commands."""
    edge = steps.add_parser(
        "edge",
        help="ORT-format conversion, device-profile budgets on an emulated host, edge bundle",
        description="Convert each ONNX candidate to the ORT format, time it with the bundle's "
        "script on one CPU under the profile's memory cap, scale by the profile's slowdown, "
        "and bundle the smallest within the profile. Exit 1 listing every candidate if none.",
    )
    edge.add_argument("sources", type=Path, nargs="+", help="ONNX candidates (FP32, INT8, ...)")
    edge.add_argument("--profile", choices=PROFILE_NAMES, default="rpi5")
    edge.add_argument("--validation", type=Path, required=True, help=".npz of inputs")
    edge.add_argument("--max-size-mb", type=non_negative, help="override the profile's size")
    edge.add_argument("--max-latency-ms", type=non_negative, help="override the profile's p50")
    edge.add_argument("--iterations", type=int_at_least(10), default=200)
    edge.add_argument("--out", type=Path, required=True, help="the bundle directory")


def run_edge(args: argparse.Namespace) -> int:
    """Convert, measure, check, bundle; 0 when a candidate fits the profile, else 1."""
    from dataclasses import replace

    from servinglib.optimize._cli_prune import load_arrays
    from servinglib.optimize.edge import PROFILES, edge_target

    profile = PROFILES[args.profile]
    if args.max_size_mb is not None:
        profile = replace(profile, max_size_mb=args.max_size_mb)
    if args.max_latency_ms is not None:
        profile = replace(profile, max_p50_ms=args.max_latency_ms)
    valid, _ = load_arrays(args.validation, "--validation")
    outcome = edge_target(args.sources, profile, args.out, valid, iterations=args.iterations)
    return report_edge(outcome)


def report_edge(outcome: Any) -> int:
    """Print an :class:`~servinglib.optimize.edge.EdgeOutcome`, write the bundle's
    ``edge-report.json``; 0 when a candidate fits the profile, else 1."""
    profile = outcome.profile
    print(
        f"profile {profile.name}: ≤ {profile.max_size_mb:g} MB, p50 ≤ {profile.max_p50_ms:g} ms "
        f"on the device; emulated here on 1 CPU, {profile.memory_mb} MB, 1 thread, p50 x "
        f"{profile.slowdown:g} ({profile.why})"
    )
    for candidate in outcome.candidates:
        print(f"  {candidate.describe()}")
    if outcome.chosen is None or outcome.bundle is None:
        for failure in outcome.failures:
            print(failure, file=sys.stderr)
        return 1
    report = {
        "profile": asdict(profile),
        "candidates": [
            {**asdict(c), "source": str(c.source), "ort_path": c.ort_path.name}
            for c in outcome.candidates
        ],
        "chosen": str(outcome.chosen.source),
    }
    (outcome.bundle / "edge-report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote the bundle {outcome.bundle}: {outcome.chosen.source.name} as model.ort")
    return 0
