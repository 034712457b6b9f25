"""``servinglib optimize distill``: its options and its run (the work is in .distill)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from servinglib.optimize._cli_prune import add_model_options, dynamic_axes, load_arrays
from servinglib.optimize._cli_types import int_at_least, non_negative

__all__ = ["add_distill_parser", "run_distill"]


def add_distill_parser(steps: Any) -> None:
    """Add ``distill`` to the ``optimize`` sub-commands."""
    distill = steps.add_parser(
        "distill",
        help="train a smaller student on the teacher's outputs, export it to ONNX",
        description="Knowledge distillation on unlabelled inputs: the student (--student, or "
        "derived from the teacher with --keep-layers/--width) learns the teacher's outputs; "
        "the best validation epoch is exported. Quantize it then with `optimize run`.",
    )
    add_model_options(distill)
    student = distill.add_mutually_exclusive_group(required=True)
    student.add_argument("--student", help="module:factory of your student module")
    student.add_argument(
        "--keep-layers", type=int_at_least(1), help="derive: keep N of the repeated layers"
    )
    distill.add_argument(
        "--width", type=non_negative, default=1.0, help="derive: share of hidden units kept"
    )
    distill.add_argument("--student-weights", type=Path, help="state_dict for --student")
    distill.add_argument("--train", type=Path, required=True, help=".npz of unlabelled inputs")
    distill.add_argument("--validation", type=Path, required=True, help=".npz held out")
    distill.add_argument("--loss", choices=["kl", "mse", "cosine"], default="kl")
    distill.add_argument("--temperature", type=non_negative, default=2.0)
    distill.add_argument("--epochs", type=int_at_least(1), default=10)
    distill.add_argument("--patience", type=int_at_least(0), default=3, help="0: never stop")
    distill.add_argument("--lr", type=non_negative, default=1e-3)
    distill.add_argument("--batch-size", type=int_at_least(1), default=64)
    distill.add_argument(
        "--checkpoint-dir", type=Path, help="save every epoch here; a rerun resumes from it"
    )
    distill.add_argument("--out", type=Path, required=True, help="the student's ONNX file")
    distill.add_argument("--no-progress", action="store_true")


def run_distill(args: argparse.Namespace) -> int:
    """Distill, export the student, write ``distill-report.json`` next to it."""
    from servinglib.optimize.distill import (
        DistillSettings,
        derive_student,
        distill,
        example_inputs,
    )
    from servinglib.optimize.export import export_module, load_module

    train, _ = load_arrays(args.train, "--train")
    valid, _ = load_arrays(args.validation, "--validation")
    teacher = load_module(args.model, weights=args.weights)
    if args.student:
        student = load_module(args.student, weights=args.student_weights)
    else:
        student = derive_student(
            teacher, keep_layers=args.keep_layers, width=args.width, example=example_inputs(train)
        )
    settings = DistillSettings(
        loss=args.loss,
        temperature=args.temperature,
        epochs=args.epochs,
        patience=args.patience,
        lr=args.lr,
        batch_size=args.batch_size,
        checkpoint_dir=args.checkpoint_dir,
        progress=not args.no_progress,
    )
    result = distill(teacher, student, train, valid, settings)
    sample = {name: array[:2] for name, array in valid.items()}
    exported = export_module(
        result.student,
        sample,
        args.out,
        output_names=list(args.output_names),
        dynamic_axes=dynamic_axes(args.dynamic_axis),
        allow_trace_warnings=args.allow_trace_warnings,
    )
    report = {
        "kind": "distill",
        "metric": result.metric,
        "untrained_student": result.untrained_value,
        "best": result.best_value,
        "best_epoch": result.best_epoch,
        "history": list(result.history),
        "resumed_from_epoch": result.resumed_from,
        "stopped_early": result.stopped_early,
        "teacher_params": result.teacher_params,
        "student_params": result.student_params,
        "onnx_max_abs_error": exported.max_abs_error,
    }
    path = args.out.parent / "distill-report.json"
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(
        f"student {result.student_params:,} params (teacher {result.teacher_params:,}); "
        f"{result.metric} to the teacher on held-out data: untrained "
        f"{result.untrained_value:.4f} → {result.best_value:.4f} (epoch {result.best_epoch})"
    )
    print(f"wrote {args.out} and {path}; INT8: servinglib optimize run {args.out} ...")
    return 0
