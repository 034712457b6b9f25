"""``servinglib rollout``: watch and steer a running rollout, or write its readout."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from servinglib.errors import ServinglibError

__all__ = ["add_parser", "run"]

_FINISHED = {"promoted": 0, "rolled_back": 1, "aborted": 1}


def add_parser(commands: Any, default_config: str) -> None:
    """Add ``rollout`` to the ``servinglib`` subcommands."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "rollout",
        help="status, pause, resume, abort, promote or restart a rollout; write its readout",
        description=(
            "Steer the rollout controller of a running server through its admin API\n"
            "(127.0.0.1, token in $SERVINGLIB_ADMIN_TOKEN), or write the readout of a\n"
            "rollout (HTML + JSON, one plot per gate) from its persisted evidence."
        ),
        epilog=(
            "exit codes: 0 done (status --wait: promoted), 1 status --wait: rolled back or "
            "aborted, 2 bad arguments, refused, or timed out"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "action",
        choices=["status", "pause", "resume", "abort", "promote", "restart", "report"],
        help="restart: run a rolled-back or aborted rollout again from step 0",
    )
    parser.add_argument("model", nargs="?", help="model name (all actions but status)")
    parser.add_argument("--port", type=int, default=9901, help="admin port (default: %(default)s)")
    parser.add_argument(
        "--token-env",
        default="SERVINGLIB_ADMIN_TOKEN",
        help="variable holding the admin token (default: %(default)s)",
    )
    parser.add_argument(
        "--wait", action="store_true", help="status: wait until the rollout of MODEL finishes"
    )
    parser.add_argument(
        "--timeout", type=float, default=3600.0, help="--wait limit in seconds (default: 3600)"
    )
    parser.add_argument(
        "--config", default=default_config, help="report: servinglib.yaml (default: %(default)s)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("rollout-report"), help="report: directory"
    )


def run(args: argparse.Namespace) -> int:
    """Run ``servinglib rollout ACTION``."""
    if args.model is None and (args.action != "status" or args.wait):
        print(f"error: rollout {args.action} needs MODEL", file=sys.stderr)
        return 2
    if args.action == "report":
        from servinglib.delivery.report import write_rollout_report

        document = write_rollout_report(args.config, args.model, args.out)
        print(
            f"wrote {args.out / 'index.html'}: {document['status']} at step {document['step']}"
            f"; {'every verdict reproduced' if document['reproduced'] else 'VERDICTS DIFFER'}"
        )
        return 0 if document["reproduced"] else 1
    from servinglib.serve.admin_client import AdminClient

    client = AdminClient.from_env(args.port, args.token_env)
    if args.action != "status":
        result = client.rollout_command(args.model, args.action)
        print(json.dumps(result, indent=2))
        return 0
    deadline = time.monotonic() + args.timeout
    while True:
        result = client.rollouts()
        if args.model is not None:
            if args.model not in result:
                raise ServinglibError(f"model {args.model!r} has no rollout policy")
            result = result[args.model]
        if not args.wait or result["status"] in _FINISHED:
            break
        if time.monotonic() > deadline:
            print(json.dumps(result, indent=2))
            print(
                f"error: the rollout still {result['status']} after {args.timeout:g}s",
                file=sys.stderr,
            )
            return 2
        time.sleep(1.0)
    print(json.dumps(result, indent=2))
    return _FINISHED.get(result["status"], 0) if args.wait else 0
