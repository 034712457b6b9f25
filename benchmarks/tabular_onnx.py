"""The tabular example's models: native runtime beside their ONNX export, in process.

For each model of ``examples/tabular`` (``diabetes-xgb``: XGBoost, 300 trees of depth 2;
``diabetes-pipeline``: a scikit-learn Pipeline with a one-hot ``sex`` and a ridge
regression), ``servinglib optimize export`` converts the version to ONNX, verifies it
against the runtime on the three self-test rows, on all 442 patients (``--sample``) and,
for the trees, on random rows with and without missing values, then measures both paths
interleaved with one thread each: p50 of a one-row call and rows/s at batch 32. The figures
are those the command prints; this script only runs it per model and tabulates them.

Usage::

    python benchmarks/tabular_onnx.py [--repeats 5] [--iterations 200]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tabular"
MODELS = {  # model name -> version directory
    "diabetes-xgb": EXAMPLE / "models" / "diabetes_xgb" / "1",
    "diabetes-pipeline": EXAMPLE / "models" / "diabetes_pipeline" / "1",
}


def _rows(work: Path, name: str) -> Path:
    """All 442 patients as an .npz the export reads (one column per feature for the
    pipeline, whose ``sex`` is a string)."""
    from sklearn.datasets import load_diabetes

    frame, _ = load_diabetes(return_X_y=True, as_frame=True)
    path = work / f"{name}.npz"
    if name == "diabetes-xgb":
        np.savez(path, input=frame.to_numpy(np.float32))
    else:
        columns = {c: frame[c].to_numpy(np.float64) for c in frame.columns}
        columns["sex"] = np.where(frame["sex"] > 0, "m", "f")
        np.savez(path, **columns)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="measurement rounds")
    parser.add_argument("--iterations", type=int, default=200, help="runs per round")
    args = parser.parse_args()
    from servinglib.config.spec import load_config
    from servinglib.optimize.measure import MeasureSettings
    from servinglib.optimize.tabular import export_tabular
    from servinglib.testing import import_file

    import_file(EXAMPLE / "prepare.py").main([])
    config = {m.name: m for m in load_config(EXAMPLE / "servinglib.yaml").models}
    settings = MeasureSettings(repeats=args.repeats, iterations=args.iterations)
    table = []
    with tempfile.TemporaryDirectory(prefix="servinglib-bench-") as tmp:
        work = Path(tmp)
        for name, version in MODELS.items():
            model = config[name]
            result = export_tabular(
                version,
                str(model.runtime),
                work / name / "1" / "model.onnx",
                sample=_rows(work, name),
                name=name,
                options=model.runtime_options,
                inputs=model.inputs,
                measure=settings,
            )
            for path, figures in (("native", result.native), ("onnx", result.onnx)):
                table.append(
                    f"| {name} | {model.runtime if path == 'native' else 'onnx (exported)'} "
                    f"| {figures.p50_ms:.3f} | {figures.rows_per_s:,.0f} "
                    f"| {result.max_abs_diff:.2g} | {result.rows_checked} |"
                )
            print(f"{name}: faster path {result.faster}", file=sys.stderr)
    print(
        f"cpu: {platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} "
        f"cores, load average {os.getloadavg()[0]:.1f}; one thread per path"
    )
    print("| model | path | p50 batch 1 (ms) | rows/s at batch 32 | max abs diff | rows checked |")
    print("|---|---|---|---|---|---|")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
