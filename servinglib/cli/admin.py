"""``servinglib admin``: load, promote, roll back or unload versions of a running server."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Run one admin action; 0 done, 1 a loaded version is not READY, 2 bad arguments."""
    from servinglib.serve.admin_client import AdminClient

    needs_version = args.action in ("load", "promote", "unload")
    if args.action != "status" and (args.model is None or (needs_version and args.version is None)):
        print(
            f"error: admin {args.action} needs MODEL" + (" VERSION" if needs_version else ""),
            file=sys.stderr,
        )
        return 2
    client = AdminClient.from_env(args.port, args.token_env)
    if args.action == "status":
        result = client.status()
    elif args.action == "load":
        result = client.load(args.model, args.version)
        if args.wait:
            client.wait_converged(result["revision"])
            states = client.wait_for(args.model, args.version)
            result = {"states": states}
            if any(state != "READY" for state in states.values()):
                print(json.dumps(result, indent=2))
                return 1
    elif args.action == "promote":
        result = client.promote(args.model, args.version)
    elif args.action == "rollback":
        result = client.rollback(args.model)
    else:
        result = client.unload(args.model, args.version)
    if args.wait and args.action in ("promote", "rollback", "unload"):
        client.wait_converged(result["revision"])
    print(json.dumps(result, indent=2))
    return 0
