"""``servinglib optimize``: thin command-line wrappers over the optimize library.

Sub-commands, each usable alone (and ``prune``, ``distill``, ``edge``: see their --help)::

    servinglib optimize export   MODULE:FACTORY|model.pt --sample sample.npz --out model.onnx
    servinglib optimize graph    model.onnx --level basic --out model.basic.onnx
    servinglib optimize quantize model.onnx --method static --calibration calib.npz --out q.onnx
    servinglib optimize run      model.onnx --validation valid.npz --out int8/model.onnx
    servinglib optimize run      model.onnx --validation valid.npz --target edge --profile rpi5

``run`` does it all (graph optimization, quantization or the accuracy-aware search,
measurement, report, budgets) and exits 1 when a budget is exceeded or no candidate fits,
2 when the input is wrong (an ``error:`` line). SIGTERM and Ctrl-C stop a command cleanly:
temporary and staging directories are removed on the way out, and the exit code is 143 or
130 with one line, no traceback. Nothing heavy is imported until a command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servinglib.errors import ServinglibError
from servinglib.optimize import _cli_run_edge as edge_target
from servinglib.optimize._cli_compress import COMMANDS, add_compress_parsers, run_compress
from servinglib.optimize._cli_output import print_outcome, print_verified
from servinglib.optimize._cli_prune import dynamic_axes
from servinglib.optimize._cli_types import (
    add_quantize_options,
    int_at_least,
    loss_limit,
    metric,
    names,
    non_negative,
)
from servinglib.optimize._signals import Terminated, terminate_cleanly
from servinglib.optimize._tabular_cli import (
    add_measure_options,
    add_tabular_options,
    export_tabular_command,
    is_tabular,
)

__all__ = ["add_parser", "main", "run"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143  # 128 + SIGINT, 128 + SIGTERM


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``optimize`` and its sub-commands to ``subparsers`` (from ``add_subparsers``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "optimize",
        help="export to ONNX, optimize the graph, quantize to INT8, measure and report",
        description="Export PyTorch models to ONNX, optimize graphs, quantize to INT8, and\n"
        "measure what it gained and lost: `optimize run` checks the optimize_budgets of a\n"
        "model (--config) and writes a report with the candidates it measured.",
        epilog="exit codes: 0 done (every budget met), 1 a budget exceeded or no candidate "
        "fits,\n  2 bad arguments or an unreadable model\n"
        "environment: SERVINGLIB_CONFIG is not read: `optimize run --config` names the file\n"
        "docs: https://github.com/servinglib/servinglib/tree/main/docs/reference/cli.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    steps = parser.add_subparsers(dest="optimize_command", required=True)

    export = steps.add_parser(
        "export",
        help="PyTorch module, TorchScript file or sklearn/xgboost/lightgbm version → ONNX",
    )
    export.add_argument(
        "model",
        help="module:factory or path/file.py:factory returning the module, a TorchScript .pt, "
        "or a version directory of runtime: sklearn|xgboost|lightgbm",
    )
    export.add_argument("--weights", type=Path, help="state_dict file to load into the module")
    export.add_argument(
        "--sample",
        type=Path,
        help=".npz of sample inputs, one array per input (axis 0 = batch); for a tabular "
        "version, rows (default: its test_data.json)",
    )
    export.add_argument(
        "--input-names", type=names, help="input order and names (default: the .npz order)"
    )
    export.add_argument(
        "--output-names", type=names, default=("output",), help="output names (default: output)"
    )
    export.add_argument(
        "--dynamic-axis",
        action="append",
        default=[],
        metavar="NAME:AXIS:LABEL",
        help="another dynamic axis, e.g. input_ids:1:sequence (axis 0 is always dynamic)",
    )
    export.add_argument("--opset", type=int, default=17, help="ONNX opset (default: 17)")
    export.add_argument("--atol", type=non_negative, default=1e-4, help="verification atol")
    export.add_argument("--rtol", type=non_negative, default=1e-3, help="verification rtol")
    export.add_argument(
        "--allow-trace-warnings",
        action="store_true",
        help="accept a trace whose exporter warnings say a branch was fixed at trace time",
    )
    export.add_argument("--out", type=Path, required=True, help="the ONNX file to write")
    add_tabular_options(export)

    graph = steps.add_parser("graph", help="ONNX Runtime offline graph optimization")
    graph.add_argument("source", type=Path, help="the ONNX model")
    graph.add_argument(
        "--level",
        choices=["basic", "extended", "all"],
        default="basic",
        help="optimization level (default: %(default)s; `all` is specific to this CPU)",
    )
    graph.add_argument("--out", type=Path, required=True, help="the optimized ONNX file")

    quantize = steps.add_parser("quantize", help="INT8 quantization with one method")
    quantize.add_argument("source", type=Path, help="the FP32 ONNX model")
    add_quantize_options(quantize, auto=False)
    quantize.add_argument("--out", type=Path, required=True, help="the INT8 ONNX file")

    run_parser = steps.add_parser(
        "run", help="quantize (or search), measure before/after, report, check budgets"
    )
    run_parser.add_argument("source", type=Path, help="the FP32 ONNX model")
    run_parser.add_argument(
        "--out", type=Path, help="the INT8 model to write (default: <source>.int8.onnx)"
    )
    run_parser.add_argument(
        "--report-dir", type=Path, help="report directory (default: that of --out)"
    )
    run_parser.add_argument(
        "--validation",
        type=Path,
        required=True,
        help="validation samples: .npz (+ labels), .jsonl or test_data.json",
    )
    run_parser.add_argument(
        "--metric",
        type=metric,
        default="auto",
        help="how INT8 is compared with FP32, per output: auto (top1 for class scores, "
        "relative-error for regression, cosine for embeddings, exact for integers), "
        "accuracy, top1, cosine, relative-error, max-abs-error, exact, module:function "
        "returning a loss (given every output), or NAME=METRIC pairs, comma-separated "
        "(default: %(default)s)",
    )
    run_parser.add_argument(
        "--labels",
        type=Path,
        help="ground-truth labels of the validation samples (.npy, .npz with `labels`, or "
        "one per line): task accuracy is reported next to agreement with FP32",
    )
    run_parser.add_argument(
        "--output", help="graph outputs judged, comma-separated (default: every output)"
    )
    add_quantize_options(run_parser, auto=True)
    run_parser.add_argument(
        "--graph-level",
        choices=["disable", "basic", "extended"],
        default="basic",
        help="graph optimization before quantizing (default: %(default)s); extended is "
        "refused: its fused operators cannot be quantized",
    )
    run_parser.add_argument("--max-size-mb", type=non_negative, help="budget: model size in MB")
    run_parser.add_argument(
        "--max-latency-ms", type=non_negative, help="budget: median single-request latency in ms"
    )
    run_parser.add_argument(
        "--max-accuracy-loss",
        type=loss_limit,
        action="append",
        default=[],
        metavar="[NAME=]LOSS",
        help="budget: loss of each output's metric vs FP32, a fraction (0.003 = 0.3 "
        "points); NAME=LOSS for one output (repeatable); auto defaults to 0.01",
    )
    run_parser.add_argument("--config", type=Path, help="read optimize_budgets from this file")
    run_parser.add_argument(
        "--model",
        help="the model in --config whose budgets apply; a model with `batching:` implies "
        "--require-batch-invariance",
    )
    run_parser.add_argument(
        "--require-batch-invariance",
        action="store_true",
        help="reject candidates whose outputs change with their batch neighbours",
    )
    run_parser.add_argument(
        "--invariance-tolerance",
        type=non_negative,
        default=1e-3,
        help="relative deviation still called batch-invariant (default: %(default)s)",
    )
    run_parser.add_argument(
        "--invariance-batch-size",
        type=int_at_least(2),
        default=8,
        help="mixed batch size (default: 8)",
    )
    add_measure_options(run_parser)
    edge_target.add_target_options(run_parser)
    run_parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_compress_parsers(steps)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the parsed ``optimize`` command; returns the exit code."""
    try:
        with terminate_cleanly():
            command = args.optimize_command
            if command == "export":
                return _export(args)
            if command == "graph":
                return _graph(args)
            if command == "quantize":
                return _quantize(args)
            if command in COMMANDS:
                return run_compress(args)
            return _run(args)
    except ServinglibError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted: temporary files removed, --out left as it was", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print("terminated: temporary files removed, --out left as it was", file=sys.stderr)
        return EXIT_TERMINATED


def _quantize_options(args: argparse.Namespace) -> Any:
    from servinglib.optimize.quantize import QuantizeOptions

    return QuantizeOptions(
        method=args.method,
        per_channel=args.per_channel,
        reduce_range=args.reduce_range,
        exclude_op_types=tuple(args.exclude_op_types),
        exclude_nodes=tuple(args.exclude_nodes),
        calibration_method=args.calibration_method,
    )


def _export(args: argparse.Namespace) -> int:
    import numpy as np

    from servinglib.optimize.errors import OptimizeError
    from servinglib.optimize.export import export_module, load_module

    if is_tabular(args):
        return export_tabular_command(args)
    if args.sample is None:
        raise OptimizeError("--sample is required to export a PyTorch model: an .npz of inputs")
    if args.sample.suffix != ".npz" or not args.sample.is_file():
        raise OptimizeError(f"--sample {args.sample}: expected an existing .npz of inputs")
    with np.load(args.sample, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    input_names = list(args.input_names or arrays)
    missing = [n for n in input_names if n not in arrays]
    if missing:
        raise OptimizeError(f"{args.sample} has no arrays {missing}; it has {list(arrays)}")
    axes = dynamic_axes(args.dynamic_axis)
    module = load_module(args.model, weights=args.weights)
    result = export_module(
        module,
        {n: arrays[n] for n in input_names},
        args.out,
        output_names=list(args.output_names),
        dynamic_axes=axes,
        opset=args.opset,
        atol=args.atol,
        rtol=args.rtol,
        allow_trace_warnings=args.allow_trace_warnings,
    )
    print_verified(
        f"{result.path} (opset {result.opset})",
        "PyTorch",
        result.checked_shapes,
        result.max_abs_error,
    )
    if result.ignored_warnings:
        print("ignored warnings raised inside PyTorch itself (not in your code):")
        for warning in result.ignored_warnings:
            print(f"  {warning}")
    return EXIT_OK


def _graph(args: argparse.Namespace) -> int:
    from servinglib.optimize.graph import optimize_graph

    result = optimize_graph(args.source, args.out, level=args.level)
    print(f"wrote {result.path}: {result.nodes_before} → {result.nodes_after} nodes ({args.level})")
    return EXIT_OK


def _quantize(args: argparse.Namespace) -> int:
    from servinglib.optimize.measure import model_size_mb
    from servinglib.optimize.quantize import quantize_model
    from servinglib.optimize.samples import input_specs, load_samples

    options = _quantize_options(args)
    calibration = None
    if args.calibration is not None:
        calibration = load_samples(args.calibration, input_specs(args.source), args.max_samples)
    result = quantize_model(args.source, args.out, options, calibration=calibration)
    before, after = model_size_mb(args.source), model_size_mb(result.path)
    print(f"wrote {result.path} ({options.describe()}): {before:.2f} MB → {after:.2f} MB")
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from servinglib.config.spec import load_config
    from servinglib.optimize.budgets import Budgets, budgets_for_model, model_batches
    from servinglib.optimize.errors import OptimizeError
    from servinglib.optimize.measure import MeasureSettings
    from servinglib.optimize.pipeline import OptimizeSettings, optimize_model

    budgets = Budgets()
    require_invariance = args.require_batch_invariance
    if args.config is not None:
        if not args.model:
            raise OptimizeError("--config needs --model NAME: whose optimize_budgets apply?")
        config = load_config(args.config)
        budgets = budgets_for_model(config, args.model)
        if model_batches(config, args.model) and not require_invariance:
            require_invariance = True
            print(
                f"note: model {args.model!r} has batching: in {args.config}, so candidates "
                "must be batch-invariant (--require-batch-invariance)",
                file=sys.stderr,
            )
    plain = [limit for name, limit in args.max_accuracy_loss if name is None]
    if len(plain) > 1:
        raise OptimizeError(
            f"--max-accuracy-loss given {len(plain)} limits for every output; give one, and "
            "NAME=LOSS for the outputs that differ"
        )
    budgets = budgets.override(
        Budgets(
            max_size_mb=args.max_size_mb,
            max_latency_ms=args.max_latency_ms,
            max_accuracy_loss=plain[0] if plain else None,
            output_losses=tuple((n, v) for n, v in args.max_accuracy_loss if n is not None),
        )
    )
    destination = args.out or args.source.with_name(args.source.stem + ".int8.onnx")
    bundle = edge_target.edge_bundle_path(args, destination)
    settings = OptimizeSettings(
        method="auto" if args.method == "auto" else _quantize_options(args),
        metric=args.metric,
        output=args.output,
        budgets=budgets,
        require_invariance=require_invariance,
        graph_level=args.graph_level,
        measure=MeasureSettings(
            threads=args.threads,
            warmup=args.warmup,
            iterations=args.iterations,
            repeats=args.repeats,
            batch_size=args.batch_size,
            min_round_s=args.min_round_s,
        ),
        invariance_tolerance=args.invariance_tolerance,
        invariance_batch_size=args.invariance_batch_size,
        max_samples=args.max_samples,
        progress=not args.no_progress,
    )
    outcome = optimize_model(
        args.source,
        destination,
        validation=args.validation,
        calibration=args.calibration,
        labels=args.labels,
        report_dir=args.report_dir,
        settings=settings,
    )
    print_outcome(outcome)
    for failure in outcome.failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    if bundle is not None and outcome.passed:
        return edge_target.finish_edge_target(args, bundle, outcome)
    return EXIT_OK if outcome.passed else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m servinglib.optimize.cli ...``: the same commands without ``servinglib``."""
    parser = argparse.ArgumentParser(prog="servinglib")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(["optimize", *(argv if argv is not None else sys.argv[1:])]))


if __name__ == "__main__":
    sys.exit(main())
