"""``servinglib batch-predict``: parse the options, run :func:`servinglib.batch.predict`."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from servinglib.config.env import CONFIG_ENV, DEFAULT_CONFIG

__all__ = ["add_parser", "run"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the ``batch-predict`` sub-command to the ``servinglib`` parser."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "batch-predict",
        help="score a dataset (Parquet, CSV, JSON Lines) with a model version",
        description="Score every row of a dataset with one model version, after its self-tests.\n"
        "Columns are read with the types the model's input_schema declares; columns it does\n"
        "not declare (ids, labels) are left out with a warning (or chosen with --columns);\n"
        "a row that cannot be read or fails input_schema becomes an error row.",
        epilog="exit codes: 0 done, 1 the version failed its self-tests, too many rows failed\n"
        "  (every one of the first 256 stops the job at once) or a worker died, 2 bad options\n"
        "  or an input file that cannot be read\n"
        "environment: SERVINGLIB_CONFIG is the default --config\n"
        "docs: https://github.com/servinglib/servinglib/tree/main/docs/reference/cli.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config",
        default=os.environ.get(CONFIG_ENV, DEFAULT_CONFIG),
        help="servinglib.yaml (default: $SERVINGLIB_CONFIG or %(default)s)",
    )
    parser.add_argument("--model", required=True, help="the model to score with")
    parser.add_argument("--version", dest="model_version", help="version (default: the default)")
    parser.add_argument("--input", required=True, help="a file, a directory or a glob")
    parser.add_argument("--input-format", choices=["parquet", "csv", "json"])
    parser.add_argument("--output", required=True, help="output directory")
    parser.add_argument("--output-format", choices=["parquet", "jsonl"], default="parquet")
    parser.add_argument("--id-column", help="input column carried to the output")
    parser.add_argument("--features-column", help="input column holding the features as JSON")
    parser.add_argument(
        "--columns",
        help="comma-separated feature columns (default: those the model's input_schema "
        "declares; other columns are left out with a warning)",
    )
    parser.add_argument(
        "--numpy-lists",
        action="store_true",
        help="pass numeric list columns as NumPy arrays (models that accept arrays only)",
    )
    parser.add_argument("--batch-size", type=int, help="rows per predict_batch call")
    parser.add_argument("--workers", type=int, default=1, help="processes or Ray actors")
    parser.add_argument(
        "--max-error-rate",
        type=float,
        default=0.01,
        help="stop when more than this share of rows fail (default: %(default)s)",
    )
    parser.add_argument(
        "--call-timeout-s",
        type=float,
        help="seconds a predict_batch call may run before its rows become error rows and its "
        "worker is replaced (default: 3 x the model's deadline_ms, at least 30; 0: no limit; "
        "local engine)",
    )
    parser.add_argument("--engine", choices=["local", "ray"], default="local")
    parser.add_argument("--address", help="Ray cluster address (auto, ray://host:10001)")
    parser.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs per Ray actor")
    parser.add_argument("--resume", action="store_true", help="finish a killed job")
    parser.add_argument("--overwrite", action="store_true", help="replace the output")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the job; exit 1 when the version fails its self-tests or too many rows fail."""
    from servinglib.batch import BatchAbortedError, BatchJob, predict
    from servinglib.errors import ModelLoadError, ModelNotReadyError, ServinglibError
    from servinglib.monitoring.logs import configure_logging

    configure_logging("error")
    job = BatchJob(
        config=args.config,
        model=args.model,
        input=args.input,
        output=args.output,
        version=args.model_version,
        input_format=args.input_format,
        output_format=args.output_format,
        id_column=args.id_column,
        features_column=args.features_column,
        columns=tuple(c.strip() for c in args.columns.split(",") if c.strip())
        if args.columns
        else None,
        numpy_lists=args.numpy_lists,
        batch_size=args.batch_size,
        workers=args.workers,
        max_error_rate=args.max_error_rate,
        engine=args.engine,
        address=args.address,
        cpus_per_worker=args.cpus_per_worker,
        call_timeout_s=args.call_timeout_s,
        resume=args.resume,
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )
    try:
        summary = predict(job)
    except (ModelNotReadyError, ModelLoadError) as e:
        print(f"error: refusing to score: {e}", file=sys.stderr)
        return EXIT_FAILED
    except BatchAbortedError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except ServinglibError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(summary.describe())
    return EXIT_OK
