"""``servinglib optimize prune``: its options and its run (argparse here, the work in .prune)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servinglib.optimize._cli_types import int_at_least, names, non_negative

if TYPE_CHECKING:
    import numpy as np

__all__ = ["add_model_options", "add_prune_parser", "dynamic_axes", "load_arrays", "run_prune"]


def _ratios(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in names(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give shares, e.g. 0.25,0.5,0.75") from None


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """The module, its weights and the ONNX output names (shared with distill)."""
    parser.add_argument("model", help="module:factory or path/file.py:factory (a torch module)")
    parser.add_argument("--weights", type=Path, help="state_dict file to load into the module")
    parser.add_argument("--output-names", type=names, default=("output",), help="ONNX output names")
    parser.add_argument(
        "--dynamic-axis",
        action="append",
        default=[],
        metavar="NAME:AXIS:LABEL",
        help="another dynamic axis of the export, e.g. input_ids:1:sequence",
    )
    parser.add_argument(
        "--allow-trace-warnings",
        action="store_true",
        help="accept an export whose trace warnings say a branch was fixed at trace time "
        "(e.g. transformers' attention-mask checks)",
    )


def add_prune_parser(steps: Any) -> None:
    """Add ``prune`` to the ``optimize`` sub-commands."""
    prune = steps.add_parser(
        "prune",
        help="structured pruning (channels/neurons or attention heads), fine-tuned, measured",
        description="Remove whole channels and neurons (or attention heads of a BERT-style "
        "transformer, --structure heads) at each ratio (iterative prune → "
        "fine-tune), export each to ONNX, judge it against the unpruned model and time them "
        "interleaved; write the smallest within every budget. Exit 1 when none is.",
    )
    add_model_options(prune)
    prune.add_argument(
        "--train", type=Path, required=True, help=".npz of training inputs (+ optional labels)"
    )
    prune.add_argument(
        "--validation", type=Path, required=True, help=".npz of validation inputs (+ labels)"
    )
    prune.add_argument("--ratios", type=_ratios, default=(0.25, 0.5, 0.75), help="shares")
    prune.add_argument("--importance", choices=["magnitude", "taylor"], default="magnitude")
    prune.add_argument(
        "--structure",
        choices=["channels", "heads"],
        default="channels",
        help="what is removed: channels and neurons, or whole attention heads (BERT-style "
        "query/key/value attention; hidden size kept) (default: %(default)s)",
    )
    prune.add_argument("--epochs", type=int_at_least(0), default=3, help="fine-tune epochs")
    prune.add_argument("--lr", type=non_negative, default=1e-3, help="fine-tune learning rate")
    prune.add_argument("--keep", type=names, default=(), help="module names never pruned")
    prune.add_argument("--metric", choices=["auto", "accuracy", "top1", "cosine"], default="auto")
    prune.add_argument("--max-accuracy-loss", type=non_negative, default=0.01)
    prune.add_argument("--max-size-mb", type=non_negative)
    prune.add_argument("--max-latency-ms", type=non_negative)
    prune.add_argument("--repeats", type=int_at_least(1), default=5, help="timing rounds")
    prune.add_argument("--iterations", type=int_at_least(1), default=100, help="runs/round")
    prune.add_argument("--batch-size", type=int_at_least(1), default=32)
    prune.add_argument("--out", type=Path, required=True, help="the pruned ONNX model")
    prune.add_argument("--report-dir", type=Path, help="default: the directory of --out")
    prune.add_argument("--no-progress", action="store_true")


def load_arrays(path: Path, flag: str) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """Inputs (every array but ``labels``) and labels of an ``.npz``."""
    import numpy as np

    from servinglib.optimize.errors import OptimizeError

    if path.suffix != ".npz" or not path.is_file():
        raise OptimizeError(f"{flag} {path}: expected an existing .npz of input arrays")
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    labels = arrays.pop("labels", None)
    if not arrays:
        raise OptimizeError(f"{flag} {path} holds no input arrays (only labels)")
    return arrays, labels


def dynamic_axes(specs: list[str]) -> dict[str, dict[int, str]]:
    """``NAME:AXIS:LABEL`` options as the exporter's dynamic axes."""
    from servinglib.optimize.errors import OptimizeError

    axes: dict[str, dict[int, str]] = {}
    for spec in specs:
        name, axis, label = [*spec.split(":"), "", ""][:3]
        if not (name and axis.isdigit() and label):
            raise OptimizeError(f"--dynamic-axis {spec!r}: use NAME:AXIS:LABEL, e.g. ids:1:seq")
        axes.setdefault(name, {})[int(axis)] = label
    return axes


def run_prune(args: argparse.Namespace) -> int:
    """Prune, print the curve, write the report; 0 when a ratio fits, else 1."""
    import sys

    from servinglib.optimize.export import load_module
    from servinglib.optimize.measure import MeasureSettings
    from servinglib.optimize.prune import PruneData, PruneSettings, prune_model
    from servinglib.optimize.prune_report import write_prune_report

    train, train_labels = load_arrays(args.train, "--train")
    valid, valid_labels = load_arrays(args.validation, "--validation")
    module = load_module(args.model, weights=args.weights)
    settings = PruneSettings(
        ratios=args.ratios,
        importance=args.importance,
        structure=args.structure,
        epochs=args.epochs,
        lr=args.lr,
        keep=args.keep,
        max_loss=args.max_accuracy_loss,
        max_size_mb=args.max_size_mb,
        max_latency_ms=args.max_latency_ms,
        metric=args.metric,
        output_names=args.output_names,
        dynamic_axes=dynamic_axes(args.dynamic_axis),
        allow_trace_warnings=args.allow_trace_warnings,
        measure=MeasureSettings(
            repeats=args.repeats, iterations=args.iterations, batch_size=args.batch_size
        ),
        progress=not args.no_progress,
    )
    data = PruneData(train, valid, train_labels, valid_labels)
    outcome = prune_model(module, data, args.out, settings)
    report, figure = write_prune_report(outcome, args.report_dir or args.out.parent, settings)
    print(f"metric: {outcome.metric} (loss vs the unpruned model; budget {settings.max_loss:g})")
    for candidate in outcome.candidates:
        claim = candidate.p50_claim.describe() if candidate.p50_claim else "the reference"
        print(f"  {candidate.describe()}; {claim}")
    print(f"report: {report}, {figure}")
    if outcome.chosen is not None:
        removed = f"{outcome.chosen.ratio:.0%} of {settings.structure} removed"
        print(f"wrote {outcome.model}: {removed}")
        return 0
    for failure in outcome.failures:
        print(f"FAILED: {failure}" if failure.startswith("no") else failure, file=sys.stderr)
    return 1
