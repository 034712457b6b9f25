"""The model-shrinking sub-commands of ``servinglib optimize``: prune, distill, edge."""

from __future__ import annotations

import argparse
from typing import Any

from servinglib.optimize._cli_distill import add_distill_parser, run_distill
from servinglib.optimize._cli_edge import add_edge_parser, run_edge
from servinglib.optimize._cli_prune import add_prune_parser, run_prune

__all__ = ["COMMANDS", "add_compress_parsers", "run_compress"]

COMMANDS = {"prune": run_prune, "distill": run_distill, "edge": run_edge}


def add_compress_parsers(steps: Any) -> None:
    """Add ``prune``, ``distill`` and ``edge`` to the ``optimize`` sub-commands."""
    add_prune_parser(steps)
    add_distill_parser(steps)
    add_edge_parser(steps)


def run_compress(args: argparse.Namespace) -> int:
    """Run the parsed prune, distill or edge command; returns the exit code."""
    return COMMANDS[args.optimize_command](args)
