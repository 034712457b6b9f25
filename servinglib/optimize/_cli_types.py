"""Argument types and shared options of ``servinglib optimize`` (argparse only, nothing heavy)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = [
    "add_quantize_options",
    "int_at_least",
    "loss_limit",
    "metric",
    "names",
    "non_negative",
]


def names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def int_at_least(low: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum {low}")
        return value

    return parse


def non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"{text!r} must be a number >= 0")
    return value


def metric(text: str) -> str:
    from servinglib.optimize.errors import OptimizeError
    from servinglib.optimize.judging import parse_metric_spec

    try:
        parse_metric_spec(text)
    except OptimizeError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def loss_limit(text: str) -> tuple[str | None, float]:
    """``0.01`` (every output) or ``amount=0.05`` (one output)."""
    name, sep, value = text.rpartition("=")
    limit = non_negative(value)
    if sep and not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} names no output; write NAME=LIMIT")
    return (name.strip() if sep else None), limit


def add_quantize_options(parser: argparse.ArgumentParser, *, auto: bool) -> None:
    methods = ["dynamic", "dynamic-per-token", "static"]
    parser.add_argument(
        "--method",
        choices=(["auto", *methods] if auto else methods),
        default="auto" if auto else "dynamic",
        help="quantization method; auto = accuracy-aware search (default: %(default)s)",
    )
    parser.add_argument(
        "--per-channel", action="store_true", help="one weight scale per output channel"
    )
    parser.add_argument(
        "--reduce-range", action="store_true", help="7-bit weights (CPUs without VNNI)"
    )
    parser.add_argument(
        "--exclude-op-types", type=names, default=(), help="operator types left in float: A,B"
    )
    parser.add_argument(
        "--exclude-nodes", type=names, default=(), help="node names left in float: a,b"
    )
    parser.add_argument(
        "--calibration",
        type=Path,
        help="calibration samples for static: .npz, .jsonl or test_data.json",
    )
    parser.add_argument(
        "--calibration-method",
        choices=["minmax", "entropy", "percentile"],
        default="minmax",
        help="how static calibration sets activation ranges (default: %(default)s)",
    )
    parser.add_argument(
        "--max-samples",
        type=int_at_least(1),
        default=1000,
        help="use at most this many samples of each file (default: %(default)s)",
    )
