"""The ``servinglib`` command: thin wrappers that parse, call the library, print and exit."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

from servinglib.errors import ServinglibError

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _default_config() -> str:
    return os.environ.get("SERVINGLIB_CONFIG", "servinglib.yaml")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="servinglib", description="Serve machine-learning models."
    )
    parser.add_argument(
        "--version", action="version", version=f"servinglib {package_version('servinglib')}"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve every model of a config with gunicorn")
    serve.add_argument(
        "--config", default=_default_config(), help="servinglib.yaml (default: %(default)s)"
    )
    serve.add_argument("--host", help="address to bind (overrides server.host)")
    serve.add_argument("--port", type=int, help="port to bind (overrides server.port)")
    serve.add_argument("--workers", type=int, help="worker processes (overrides server.workers)")
    serve.add_argument("--threads", type=int, help="threads per worker (overrides server.threads)")
    serve.add_argument(
        "--worker",
        choices=["asyncio", "gthread"],
        help="gunicorn worker class (overrides server.worker)",
    )

    validate = commands.add_parser(
        "validate", help="check a config and what it references, serving nothing"
    )
    validate.add_argument(
        "--config", default=_default_config(), help="servinglib.yaml (default: %(default)s)"
    )

    selftest = commands.add_parser(
        "selftest", help="load every model version and run its self-tests"
    )
    selftest.add_argument(
        "--config", default=_default_config(), help="servinglib.yaml (default: %(default)s)"
    )
    selftest.add_argument("--junit", type=Path, help="also write JUnit XML to this file")

    admin = commands.add_parser(
        "admin", help="load, promote, roll back or unload versions of a running server"
    )
    admin.add_argument("action", choices=["status", "load", "promote", "rollback", "unload"])
    admin.add_argument("model", nargs="?", help="model name (all actions but status)")
    admin.add_argument("version", nargs="?", help="version (load, promote, unload)")
    admin.add_argument(
        "--port", type=int, default=9901, help="admin port on 127.0.0.1 (default: %(default)s)"
    )
    admin.add_argument(
        "--token-env",
        default="SERVINGLIB_ADMIN_TOKEN",
        help="variable holding the admin token (default: %(default)s)",
    )
    admin.add_argument(
        "--wait",
        action="store_true",
        help="wait until every worker applied the change (load: until it is READY or FAILED)",
    )
    from servinglib.optimize.cli import add_parser as add_optimize_parser  # light: argparse only

    add_optimize_parser(commands)
    from servinglib.batch.cli import add_parser as add_batch_parser  # light: argparse only

    add_batch_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``servinglib`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            from servinglib.serve.launcher import serve

            serve(
                args.config,
                host=args.host,
                port=args.port,
                workers=args.workers,
                threads=args.threads,
                worker=args.worker,
            )
            return EXIT_OK
        if args.command == "validate":
            return _validate(args.config)
        if args.command == "admin":
            return _admin(args)
        if args.command == "batch-predict":
            from servinglib.batch.cli import run as run_batch

            return run_batch(args)
        if args.command == "optimize":
            from servinglib.optimize.cli import run as run_optimize

            return run_optimize(args)
        return _selftest(args.config, args.junit)
    except ServinglibError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE


def _validate(config_path: str) -> int:
    from servinglib.checks import validate_service

    config, problems = validate_service(config_path)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if config is None:
        return EXIT_USAGE
    if problems:
        return EXIT_FAILED
    assert config is not None
    names = ", ".join(m.name for m in config.models)
    print(f"{config_path}: OK ({len(config.models)} model(s): {names})")
    return EXIT_OK


def _admin(args: argparse.Namespace) -> int:
    import json

    from servinglib.serve.admin_client import AdminClient

    needs_version = args.action in ("load", "promote", "unload")
    if args.action != "status" and (args.model is None or (needs_version and args.version is None)):
        print(
            f"error: admin {args.action} needs MODEL" + (" VERSION" if needs_version else ""),
            file=sys.stderr,
        )
        return EXIT_USAGE
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
                return EXIT_FAILED
    elif args.action == "promote":
        result = client.promote(args.model, args.version)
    elif args.action == "rollback":
        result = client.rollback(args.model)
    else:
        result = client.unload(args.model, args.version)
    if args.wait and args.action in ("promote", "rollback", "unload"):
        client.wait_converged(result["revision"])
    print(json.dumps(result, indent=2))
    return EXIT_OK


def _selftest(config_path: str, junit: Path | None) -> int:
    from servinglib.checks import run_all_selftests
    from servinglib.config import load_config
    from servinglib.monitoring.logs import configure_logging
    from servinglib.registry import VersionState
    from servinglib.selftest_report import format_table, write_junit

    config = load_config(config_path)
    configure_logging("error")
    records = run_all_selftests(config)
    print(format_table(records))
    if junit is not None:
        write_junit(records, junit)
        print(f"JUnit XML written to {junit}")
    failed = [r for r in records if r.state is VersionState.FAILED]
    print(f"{len(records) - len(failed)} of {len(records)} version(s) passed")
    ready = [r for r in records if r.state is VersionState.READY]
    checks_ok = _serving_checks(config, ready)
    return EXIT_FAILED if failed or not checks_ok else EXIT_OK


def _serving_checks(config: Any, records: list[Any]) -> bool:
    """Batch invariance of batched models and optimize budgets, on the self-test inputs."""
    from servinglib.optimize.budgets import budgets_for_model, check_served_version
    from servinglib.optimize.invariance import check_model_batch_invariance
    from servinglib.selftest import load_test_data

    ok = True
    for record in records:
        model = config.models[[m.name for m in config.models].index(record.model)]
        inputs = [case.input for case in load_test_data(record.path)]
        if not inputs or record.instance is None:
            continue
        if model.batching is not None and len(inputs) > 1:
            result = check_model_batch_invariance(record.instance, inputs)
            verdict = "batch-invariant" if result.invariant else "NOT batch-invariant"
            print(
                f"{record.model} {record.version}: {verdict} (worst relative deviation "
                f"{result.worst_relative:.2e}, tolerance {result.tolerance:.0e})"
            )
            ok = ok and result.invariant
        budgets = budgets_for_model(config, record.model)
        for budget in check_served_version(record.instance, record.path, inputs, budgets, runs=10):
            print(f"{record.model} {record.version}: {budget.describe()}")
            ok = ok and budget.passed
    return ok


if __name__ == "__main__":
    sys.exit(main())
