"""The ``servinglib`` command: thin wrappers that parse, call the library, print and exit."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import version as package_version
from pathlib import Path

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
            )
            return EXIT_OK
        if args.command == "validate":
            return _validate(args.config)
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
    return EXIT_FAILED if failed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
