"""``servinglib optimize run --target edge``: the run, then the edge profile's checks and bundle.

After ``run`` has written its INT8 model within the budgets, the FP32 source and the INT8
model go through :func:`.edge.edge_target` as ``optimize edge`` would take them: ORT-format
conversion, parity with ONNX, size and p50 on the emulated host against the profile, and
the bundle of the smallest that fits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from servinglib.optimize._cli_edge import PROFILE_NAMES

__all__ = ["add_target_options", "edge_bundle_path", "finish_edge_target"]


def add_target_options(parser: argparse.ArgumentParser) -> None:
    """``--target``, ``--profile`` and ``--bundle`` of ``optimize run``."""
    parser.add_argument(
        "--target",
        choices=["server", "edge"],
        default="server",
        help="server: the INT8 model only; edge: then ORT format, the --profile's size and "
        "p50 on an emulated host, and an edge bundle (default: %(default)s)",
    )
    parser.add_argument(
        "--profile", choices=PROFILE_NAMES, help="edge device profile (default: rpi5)"
    )
    parser.add_argument("--bundle", type=Path, help="edge bundle directory (default: <out>/edge)")


def edge_bundle_path(args: argparse.Namespace, destination: Path) -> Path | None:
    """The bundle directory of ``--target edge`` (None for ``server``), refused before any
    work when it holds other files."""
    from servinglib.optimize.edge_bundle import refuse_foreign_directory
    from servinglib.optimize.errors import OptimizeError

    if args.target != "edge":
        given = [flag for flag in ("profile", "bundle") if getattr(args, flag) is not None]
        if given:
            raise OptimizeError(f"--{given[0]} applies to the edge target: add --target edge")
        return None
    args.profile = args.profile or "rpi5"

    bundle: Path = args.bundle or destination.parent / "edge"
    refuse_foreign_directory(bundle)
    return bundle


def finish_edge_target(args: argparse.Namespace, bundle: Path, outcome: Any) -> int:
    """Edge checks of the FP32 source and the written INT8 model; 0 when one fits."""
    from servinglib.optimize._cli_edge import report_edge
    from servinglib.optimize.edge import PROFILES, edge_target
    from servinglib.optimize.samples import input_specs, load_samples, stack_feeds

    if outcome.model is None:
        print("edge target not checked: the run wrote no model", file=sys.stderr)
        return 1
    samples = load_samples(args.validation, input_specs(args.source), args.max_samples)
    print(f"edge target {args.profile}: {args.source} and {outcome.model}")
    result = edge_target(
        [args.source, outcome.model],
        PROFILES[args.profile],
        bundle,
        stack_feeds(samples.feeds),
        iterations=args.iterations,
    )
    return report_edge(result)
