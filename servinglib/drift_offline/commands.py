"""``servinglib profile`` and ``servinglib drift report`` (building the CLI parser imports no
prometheus_client before the launcher configures it)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parsers", "run", "run_drift", "run_profile"]


DOCS = "https://github.com/servinglib/servinglib/tree/main/docs/reference/cli.md"


def _epilog(exit_codes: str) -> str:
    return (
        f"exit codes: {exit_codes}\n"
        "environment: SERVINGLIB_CONFIG is the default --config\n"
        f"docs: {DOCS}"
    )


def add_parsers(commands: Any, default_config: str) -> None:
    """Add the ``profile`` and ``drift`` sub-commands to the ``servinglib`` parser."""
    profile = commands.add_parser(
        "profile",
        help="write a version's reference profile (profile.json) for drift monitoring",
        description="Profile what a version's features and outputs looked like in training:\n"
        "the fields its input_schema declares (other columns, such as ids and labels, are\n"
        "left out), read with their declared types as batch-predict reads them, answered\n"
        "with predict_batch; writes profile.json into the version directory.",
        epilog=_epilog("0 written, 2 bad arguments, unreadable data, missing feature column"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    config_help = "servinglib.yaml (default: $SERVINGLIB_CONFIG or %(default)s)"
    profile.add_argument("--config", default=default_config, help=config_help)
    profile.add_argument("--model", required=True)
    profile.add_argument("--version", required=True)
    source = profile.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", type=Path, help="training rows: .parquet, .csv or .jsonl")
    source.add_argument("--from-log", metavar="DURATION", help="logged answers, e.g. 24h")
    profile.add_argument(
        "--columns",
        help="comma-separated feature columns (default: those input_schema declares)",
    )
    profile.add_argument(
        "--no-outputs", action="store_true", help="profile features only (do not load the model)"
    )
    profile.add_argument("--no-progress", action="store_true", help="no progress bar")
    profile.add_argument("--window-seconds", type=float, default=600.0, help="default: 600")
    profile.add_argument("--window-slots", type=int, default=10, help="default: 10")
    profile.add_argument(
        "--window-requests", type=int, help="also cap the window at the newest N requests"
    )
    drift = commands.add_parser(
        "drift",
        help="offline drift report from the prediction log",
        description="Compare a version's logged requests and answers of a period with its\n"
        "profile.json, field by field; writes an HTML report with charts and a JSON summary.",
        epilog=_epilog("0 no field drifted, 1 a field drifted, 2 bad arguments or no profile"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    drift.add_argument("action", choices=["report"])
    drift.add_argument("--config", default=default_config, help=config_help)
    drift.add_argument("--model", required=True)
    drift.add_argument("--version", help="default: the model's default version")
    drift.add_argument("--since", default="24h", help="period, e.g. 30m, 24h (default: 24h)")
    drift.add_argument("--out", type=Path, default=Path("drift-report"), help="output folder")


def run(args: argparse.Namespace) -> int:
    """Run ``servinglib profile`` or ``servinglib drift``; returns the exit code."""
    return run_profile(args) if args.command == "profile" else run_drift(args)


def run_profile(args: argparse.Namespace) -> int:
    """Build and write the profile; print where and what was profiled."""
    from servinglib.drift_offline.building import profile_version
    from servinglib.monitoring.drift.profile import ProfileError, WindowSpec
    from servinglib.monitoring.drift.sources import parse_since

    window = WindowSpec(args.window_seconds, args.window_slots, args.window_requests)
    problems = window.problems(slots_name="--window-slots")
    if problems:  # before any data is read or model loaded
        raise ProfileError(problems[0])
    path, profile = profile_version(
        args.config,
        args.model,
        args.version,
        data=args.data,
        log_since_s=None if args.from_log is None else parse_since(args.from_log),
        with_outputs=not args.no_outputs,
        window=window,
        columns=[c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None,
        progress=not args.no_progress,
        note=lambda message: print(f"note: {message}", file=sys.stderr),
    )
    for field in profile.fields:
        note = "  every reference value is missing" if field.null_share == 1 else ""
        print(f"{field.role:8} {field.name:24} {field.kind:12} {field.bins} bins{note}")
    print(f"profile of {len(profile.fields)} field(s) written to {path}")
    return 0


def run_drift(args: argparse.Namespace) -> int:
    """Write the offline report; exit 1 when a field drifted."""
    from servinglib.drift_offline.report import write_drift_report
    from servinglib.monitoring.drift.sources import parse_since

    result = write_drift_report(
        args.config, args.model, args.version, parse_since(args.since), args.out
    )
    drifted = [f["name"] for f in result["fields"] if f["drifted"]]
    print(json.dumps({"requests": result["requests"], "drifted": drifted}))
    print(f"report written to {args.out / 'index.html'}")
    return 1 if drifted else 0
