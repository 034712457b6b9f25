"""The ``servinglib`` command: thin wrappers that parse, call the library, print and exit."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

from servinglib.cli import admin as admin_command
from servinglib.cli import publish, rollout
from servinglib.config.env import CONFIG_ENV, DEFAULT_CONFIG
from servinglib.errors import ServinglibError

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_BROKEN_PIPE = 141  # what a shell reports for a command killed by SIGPIPE (128 + 13)


DOCS = "https://github.com/servinglib/servinglib/tree/main/docs/reference/cli.md"


def _default_config() -> str:
    return os.environ.get(CONFIG_ENV, DEFAULT_CONFIG)


def _epilog(exit_codes: str) -> str:
    return (
        f"exit codes: {exit_codes}\n"
        "environment: SERVINGLIB_CONFIG is the default --config; SERVINGLIB_<KEY> overrides\n"
        "  server.<key> (e.g. SERVINGLIB_PORT=8081)\n"
        f"docs: {DOCS}"
    )


def _add_command(
    commands: Any, name: str, summary: str, description: str, exit_codes: str
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog=_epilog(exit_codes),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def _add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default=_default_config(),
        help="servinglib.yaml (default: $SERVINGLIB_CONFIG or %(default)s)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="servinglib",
        description="Serve machine-learning models. New here? servinglib init, then "
        "servinglib validate, selftest and serve.",
        epilog=f"docs: {DOCS}",
    )
    parser.add_argument(
        "--version", action="version", version=f"servinglib {package_version('servinglib')}"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    init = _add_command(
        commands,
        "init",
        "write a one-file example model, its config, weights and self-test here",
        "Write the README's one-file model (models/eta/model.py), servinglib.yaml, "
        "models/eta/1/weights.json\nand a passing models/eta/1/test_data.json into the "
        "directory, so that validate, selftest\nand serve work at once.",
        "0 written, 2 a file exists (nothing written; --force replaces)",
    )
    init.add_argument("directory", nargs="?", type=Path, default=Path(), help="default: here")
    init.add_argument("--force", action="store_true", help="replace files that exist")
    init.add_argument(
        "--runtime",
        choices=["sklearn", "xgboost", "lightgbm"],
        help="instead: a tabular model served with no model code (writes train.py and "
        "servinglib.yaml, then trains version 1 on data bundled with scikit-learn)",
    )

    doctor = _add_command(
        commands,
        "doctor",
        "check Python, extras, torch and ONNX Runtime builds, ports and paths",
        "Check the environment servinglib runs in and print what to fix: Python version,\n"
        "optional extras, the torch build (CPU or CUDA), ONNX Runtime providers, free ports,\n"
        "and that the prediction-log directory is writable.",
        "0 nothing to fix, 1 something to fix (each 'fix' line says how)",
    )
    _add_config(doctor)

    serve = _add_command(
        commands,
        "serve",
        "serve every model of a config with gunicorn",
        "Serve every model of the config with gunicorn; models load in each worker after\n"
        "fork. Prints one 'ready:' line (models, READY versions, URL) once every worker is\n"
        "ready; stops on Ctrl-C or SIGTERM, draining requests.",
        "0 stopped, 2 invalid config, port taken or bad flag",
    )
    _add_config(serve)
    serve.add_argument("--host", help="address to bind (overrides server.host)")
    serve.add_argument("--port", type=int, help="port to bind (overrides server.port)")
    serve.add_argument("--workers", type=int, help="worker processes (overrides server.workers)")
    serve.add_argument("--threads", type=int, help="threads per worker (overrides server.threads)")
    serve.add_argument(
        "--worker",
        choices=["asyncio", "gthread"],
        help="gunicorn worker class (overrides server.worker)",
    )
    serve.add_argument(
        "--ready-note",
        type=Path,
        help="print this file after the ready line ({url} becomes the server's URL)",
    )

    validate = _add_command(
        commands,
        "validate",
        "check a config and what it references, serving nothing",
        "Check the config and everything it references without loading a model: classes\n"
        "import, version directories exist, every version has self-test cases (test_data.json\n"
        "or self_test_cases() in the class), and every case's input passes input_schema.",
        "0 valid, 1 a problem in what the config references, 2 the config itself is invalid",
    )
    _add_config(validate)

    selftest = _add_command(
        commands,
        "selftest",
        "load every model version and run its self-tests",
        "Load every version as a worker would and run its self-tests; then check batch\n"
        "invariance of batched models and optimize_budgets of each READY version.",
        "0 every version passed, 1 a version failed (load, self-test or check), 2 invalid config",
    )
    _add_config(selftest)
    selftest.add_argument("--junit", type=Path, help="also write JUnit XML to this file")

    admin = _add_command(
        commands,
        "admin",
        "load, promote, roll back or unload versions of a running server",
        "Talk to the admin API of a running server (admin.enabled: true) on 127.0.0.1,\n"
        "with the token in $SERVINGLIB_ADMIN_TOKEN (see --token-env).",
        "0 done, 1 a loaded version is not READY (--wait), 2 bad arguments or refused",
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
    perf_data = _add_command(
        commands,
        "perf-data",
        "write perf_analyzer input data from a version's self-test cases",
        "Write the self-test inputs of a version as perf_analyzer --input-data JSON, so a load\n"
        "test sends inputs the model accepts (random ones break bounds such as pixels 0-16).\n"
        "Batched models get one entry per row, shaped without the batch dimension.",
        "0 written, 2 unknown model or no usable self-test cases",
    )
    _add_config(perf_data)
    perf_data.add_argument("--model", required=True, help="the model")
    perf_data.add_argument("--version", dest="model_version", help="default: the default")
    perf_data.add_argument("--out", type=Path, help="file to write (default: stdout)")
    from servinglib.optimize.cli import add_parser as add_optimize_parser  # light: argparse only

    add_optimize_parser(commands)
    from servinglib.drift_offline.commands import add_parsers as add_drift_parsers

    add_drift_parsers(commands, _default_config())
    rollout.add_parser(commands, _default_config())
    publish.add_parser(commands, _default_config())
    from servinglib.batch.cli import add_parser as add_batch_parser  # light: argparse only

    add_batch_parser(commands)
    from servinglib.bench.cli import add_parser as add_bench_parser  # light: argparse only

    add_bench_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``servinglib`` console script; returns the exit code."""
    try:
        return _run(_parser().parse_args(argv))
    except BrokenPipeError:  # `servinglib admin status | head`: the reader left, quietly
        _quiet_stdout()
        return EXIT_BROKEN_PIPE


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):  # stdout closed, or not a real file
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command == "init":
            return _init(args.directory, force=args.force, runtime=args.runtime)
        if args.command == "doctor":
            return _doctor(Path(args.config))
        if args.command == "serve":
            from servinglib.serve.launcher import serve

            serve(
                args.config,
                host=args.host,
                port=args.port,
                workers=args.workers,
                threads=args.threads,
                worker=args.worker,
                ready_note=_read_note(args.ready_note),
            )
            return EXIT_OK
        if args.command == "validate":
            return _validate(args.config)
        if args.command == "admin":
            return admin_command.run(args)
        if args.command == "perf-data":
            return _perf_data(args.config, args.model, args.model_version, args.out)
        if args.command == "batch-predict":
            from servinglib.batch.cli import run as run_batch

            return run_batch(args)
        if args.command == "optimize":
            from servinglib.optimize.cli import run as run_optimize

            return run_optimize(args)
        if args.command == "rollout":
            return rollout.run(args)
        if args.command == "publish":
            return publish.run(args)
        if args.command == "bench":
            from servinglib.bench.cli import run as run_bench

            return run_bench(args)
        if args.command in ("profile", "drift"):
            from servinglib.drift_offline.commands import run

            return run(args)
        return _selftest(args.config, args.junit)
    except ServinglibError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE


def _read_note(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise ServinglibError(f"--ready-note {path}: {e.strerror}; pass a readable file") from e


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


def _perf_data(config_path: str, model: str, version: str | None, out: Path | None) -> int:
    import json

    from servinglib.checks.perf_data import perf_analyzer_data

    text = json.dumps(perf_analyzer_data(config_path, model, version)) + "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}: perf_analyzer -m {model} --input-data {out} ...", file=sys.stderr)
    return EXIT_OK


def _selftest(config_path: str, junit: Path | None) -> int:
    from servinglib.checks import format_report, run_selftest_suite, write_junit
    from servinglib.config.spec import load_config
    from servinglib.monitoring.logs import configure_logging

    config = load_config(config_path)
    configure_logging("error", config.server.log_format)  # failures, with tracebacks
    run = run_selftest_suite(config)
    print(format_report(run))  # the verdict comes below every failing line
    if junit is not None:
        write_junit(run, junit)
        print(f"JUnit XML written to {junit}")
    return EXIT_OK if run.passed else EXIT_FAILED


def _init(directory: Path, *, force: bool, runtime: str | None = None) -> int:
    if runtime is not None:
        return _init_tabular(directory, runtime, force=force)
    from servinglib.cli.starter import write_starter

    written = write_starter(directory, force=force)
    for path in written:
        print(f"wrote {path}")
    print(
        "next: servinglib validate && servinglib selftest && servinglib serve --port 8080\n"
        "then: curl -s -X POST http://127.0.0.1:8080/infer -H 'content-type: application/json' "
        """-d '{"model_id": "eta", "features": {"distance_km": 2.0}}'"""
    )
    return EXIT_OK


def _init_tabular(directory: Path, runtime: str, *, force: bool) -> int:
    from servinglib.runtimes.tabular.starter import TABULAR_STARTERS, write_tabular_starter

    written = write_tabular_starter(directory, runtime, force=force)
    for path in written:
        print(f"wrote {path}")
    print(
        "next: servinglib validate && servinglib selftest && servinglib serve --port 8080\n"
        "then: curl -s -X POST http://127.0.0.1:8080/infer -H 'content-type: application/json' "
        f"-d @request.json   (model {TABULAR_STARTERS[runtime][0]!r})"
    )
    return EXIT_OK


def _doctor(config_path: Path) -> int:
    from servinglib.cli.doctor import run_doctor

    findings = run_doctor(config_path)
    for finding in findings:
        print(finding.line())
    to_fix = [f for f in findings if f.status == "fix"]
    print(f"{len(to_fix)} thing(s) to fix" if to_fix else "nothing to fix")
    return EXIT_FAILED if to_fix else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
