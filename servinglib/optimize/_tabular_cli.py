"""``servinglib optimize export`` of a tabular version: its options and its printed report.

``servinglib optimize export models/diabetes/1 --out models/diabetes-onnx/1/model.onnx``
exports a ``runtime: sklearn|xgboost|lightgbm`` version (the runtime is read from
``--config``, or ``--runtime``, or the artifact in the directory), verifies it and says
which path is faster for this model.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from servinglib.optimize._cli_output import print_verified
from servinglib.optimize._cli_types import int_at_least, non_negative

__all__ = ["add_measure_options", "add_tabular_options", "export_tabular_command", "is_tabular"]

# artifact suffix -> the runtime that serves it
_SUFFIXES = {".skops": "sklearn", ".json": "xgboost", ".ubj": "xgboost", ".txt": "lightgbm"}


def add_measure_options(parser: argparse.ArgumentParser, *, batch_size: int = 32) -> None:
    """--threads, --warmup, --iterations, --repeats, --batch-size, --min-round-s."""
    parser.add_argument(
        "--threads",
        type=int_at_least(1),
        default=1,
        help="intra-op threads when measuring (default: 1)",
    )
    parser.add_argument(
        "--warmup", type=int_at_least(0), default=20, help="warm-up runs (default: 20)"
    )
    parser.add_argument(
        "--iterations", type=int_at_least(1), default=100, help="runs per round (default: 100)"
    )
    parser.add_argument("--repeats", type=int_at_least(1), default=5, help="rounds (default: 5)")
    parser.add_argument(
        "--batch-size",
        type=int_at_least(1),
        default=batch_size,
        help=f"throughput batch size (default: {batch_size})",
    )
    parser.add_argument(
        "--min-round-s",
        type=non_negative,
        default=0.2,
        help="least time each model spends in one throughput round (default: %(default)s)",
    )


def add_tabular_options(parser: argparse.ArgumentParser) -> None:
    """The options ``export`` takes for a tabular version directory."""
    group = parser.add_argument_group(
        "tabular models (MODEL is a version directory of runtime: sklearn|xgboost|lightgbm)"
    )
    group.add_argument(
        "--runtime",
        choices=["sklearn", "xgboost", "lightgbm"],
        help="the runtime serving the version (default: from --config, else its artifact)",
    )
    group.add_argument(
        "--config",
        type=Path,
        help="servinglib.yaml of the model: its runtime, inputs: and runtime_options apply",
    )
    group.add_argument(
        "--trusted-type",
        action="append",
        default=[],
        metavar="TYPE",
        help="a type of model.skops to trust beyond skops' defaults (repeatable)",
    )
    add_measure_options(group)  # type: ignore[arg-type]


def is_tabular(args: argparse.Namespace) -> bool:
    """True when ``export`` was given a tabular version (a directory, or its artifact)."""
    model = Path(args.model)
    return bool(args.runtime or args.config) or model.is_dir() or model.suffix in _SUFFIXES


def _model_config(config_path: Path, version_dir: Path) -> Any:
    from servinglib.config.spec import load_config
    from servinglib.optimize.errors import OptimizeError

    config = load_config(config_path)
    for model in config.models:
        if model.repository.resolve() == version_dir.parent.resolve():
            return model
    repositories = [str(m.repository) for m in config.models]
    raise OptimizeError(
        f"no model of {config_path} has the repository {version_dir.parent} (they have "
        f"{repositories}); pass a version directory inside one of them"
    )


def _runtime(args: argparse.Namespace, version_dir: Path, configured: str | None) -> str:
    from servinglib.optimize.errors import OptimizeError
    from servinglib.runtimes.tabular import ARTIFACTS

    runtime = args.runtime or configured
    if runtime:
        return str(runtime)
    for name, artifacts in ARTIFACTS.items():
        if any((version_dir / artifact).is_file() for artifact in artifacts):
            return name
    raise OptimizeError(
        f"{version_dir} holds no model.skops, model.json, model.ubj or model.txt; pass "
        "--runtime sklearn|xgboost|lightgbm (and runtime_options.file through --config)"
    )


def export_tabular_command(args: argparse.Namespace) -> int:
    """Run ``export`` on a tabular version and print what was verified and measured."""
    from servinglib.optimize.errors import OptimizeError
    from servinglib.optimize.measure import MeasureSettings
    from servinglib.optimize.tabular import export_tabular

    given = Path(args.model)
    version_dir = given if given.is_dir() else given.parent
    options: dict[str, Any] = {} if given.is_dir() else {"file": given.name}
    inputs: tuple[Any, ...] = ()
    configured, name = None, version_dir.parent.name
    if args.config is not None:
        model = _model_config(args.config, version_dir)
        configured, inputs, name = model.runtime, model.inputs, model.name
        options = {**model.runtime_options, **options}
    if args.trusted_type:
        options["trusted_types"] = [*options.get("trusted_types", ()), *args.trusted_type]
    runtime = _runtime(args, version_dir, configured)
    if runtime not in ("sklearn", "xgboost", "lightgbm"):
        raise OptimizeError(f"{version_dir} is served by runtime: {runtime}, not a tabular one")
    result = export_tabular(
        version_dir,
        runtime,
        args.out,
        sample=args.sample,
        name=name,
        options=options,
        inputs=inputs,
        atol=args.atol,
        rtol=args.rtol,
        measure=MeasureSettings(
            threads=args.threads,
            warmup=args.warmup,
            iterations=args.iterations,
            repeats=args.repeats,
            batch_size=args.batch_size,
            min_round_s=args.min_round_s,
        ),
    )
    print_verified(
        str(result.path), f"runtime: {runtime}", result.checked, result.max_abs_diff, runtime
    )
    if result.self_tests is not None:
        print(f"wrote {result.self_tests} (self-tests for runtime: onnx)")
    print(f"\nmeasured interleaved, {args.threads} thread(s) each:")
    print(f"  {'path':<10} {'p50 batch 1 (ms)':>17} {f'rows/s at batch {result.batch_size}':>22}")
    for name, figures in (("native", result.native), ("onnx", result.onnx)):
        print(f"  {name:<10} {figures.p50_ms:>17.3f} {figures.rows_per_s:>22,.0f}")
    fast, slow = (
        (result.onnx, result.native) if result.faster == "onnx" else (result.native, result.onnx)
    )
    print(
        f"faster for this model: {result.faster} ({fast.rows_per_s / slow.rows_per_s:.2f}x "
        f"rows/s, p50 {fast.p50_ms:.3f} vs {slow.p50_ms:.3f} ms)"
    )
    if result.faster == "onnx":
        print(f"serve it with runtime: onnx from {result.path.parent.parent}")
    return 0
