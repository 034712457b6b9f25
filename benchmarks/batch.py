"""Batch prediction benchmarks, side by side in one run; results go to docs/benchmarks.md.

    python benchmarks/batch.py                       # about 10 minutes on 2 cores
    python benchmarks/batch.py --rows 200000 --big-rows 0 --skip-ray --no-docs   # a smoke run

Scenarios, each job in a fresh process (`servinglib.batch.predict`, progress bar off):
* limit: the in-process ``predict_batch`` ceiling of a model at the job's batch size, on
  features already decoded from Parquet (the loop a team would write by hand); for digits
  also on rows already through ``prepare`` (``predict_batch`` alone);
* local: the local engine with 1 and 2 workers on the same file (breast-cancer; digits ONNX
  with 1 worker), throughput = rows / seconds of scoring, load and self-tests excluded; the
  best of --repeat runs, as the limit is the best of 3 passes;
* memory: peak RSS of a 1-worker job over --rows and --big-rows rows (a stream: flat);
* ray: the Ray engine on a new local cluster, its throughput and its fixed start-up cost.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "benchmarks.md"
BREAST = ROOT / "examples" / "breast-cancer" / "servinglib.yaml"
DIGITS = ROOT / "examples" / "digits-classifier" / "servinglib.yaml"
CHUNK = 1_000_000
START, END = "<!-- bench:batch:start -->", "<!-- bench:batch:end -->"


def make_breast_cancer(path: Path, rows: int) -> Path:
    """``rows`` perturbed copies of the 569 samples, written 1 M rows at a time."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer().data
    rng = np.random.default_rng(0)
    schema = pa.schema([("id", pa.int64()), ("measurements", pa.list_(pa.float64(), 30))])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, CHUNK):
            n = min(CHUNK, rows - start)
            values = data[rng.integers(0, len(data), n)] * rng.normal(1.0, 0.05, (n, 30))
            measurements = pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), 30)
            ids = pa.array(np.arange(start, start + n))
            writer.write_table(pa.table([ids, measurements], schema=schema), row_group_size=65536)
    return path


def make_digits(path: Path, rows: int) -> Path:
    """``rows`` images of scikit-learn's digits, each ``{"pixels": [[64 values]]}``."""
    from sklearn.datasets import load_digits

    data = load_digits().data
    rng = np.random.default_rng(0)
    pixels = data[rng.integers(0, len(data), rows)]
    inner = pa.FixedSizeListArray.from_arrays(pa.array(pixels.ravel()), 64)
    outer = pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32)), inner)
    pq.write_table(pa.table({"id": np.arange(rows), "pixels": outer}), path, row_group_size=16384)
    return path


_JOB = """
import json, resource, sys, time
from servinglib.batch import BatchJob, predict
from servinglib.monitoring.logs import configure_logging
configure_logging("error")
args = json.loads(sys.argv[1])
summary = predict(BatchJob(**args))
# VmHWM, not ru_maxrss: ru_maxrss survives fork and exec, so it would report the parent's peak
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({
    "rows": summary.rows, "rows_per_s": summary.rows_per_s, "seconds": summary.seconds,
    "startup_s": summary.startup_s,
    "rss_mib": peak / 1024,
    "child_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
}))
"""

_LIMIT = """
import json, sys, time
import pyarrow.parquet as pq
from servinglib.batch._loading import load_version
from servinglib.monitoring.logs import configure_logging
configure_logging("error")
config, model, source, batch_size, rows, prepared = json.loads(sys.argv[1])
_, record = load_version(config, model, None, 1)
instance = record.instance
from servinglib.batch._features import FeatureSpec, rows_to_features
table = pq.ParquetFile(source).iter_batches(batch_size=rows).__next__()
# the features as the job decodes them (--numpy-lists), before prepare
features = rows_to_features(table, FeatureSpec("id", numpy_lists=True)).features
if prepared:  # what predict_batch alone costs: each row's prepare() done beforehand
    features = [instance.prepare(f) for f in features]
best = 0.0
for _ in range(3):
    started = time.perf_counter()
    for i in range(0, len(features), batch_size):
        instance.predict_batch(features[i : i + batch_size])
    best = max(best, len(features) / (time.perf_counter() - started))
print(json.dumps({"rows_per_s": best}))
"""


def _python(code: str, payload: Any, cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(payload)],
        capture_output=True, text=True, cwd=cwd, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"benchmark step failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def job(config: Path, model: str, source: Path, out: Path, **options: Any) -> dict[str, Any]:
    """Run one batch job in a fresh process; its summary and peak memory."""
    args = {
        "config": str(config), "model": model, "input": str(source), "output": str(out),
        "id_column": "id", "progress": False, "overwrite": True, "numpy_lists": True,
        **options,
    }  # fmt: skip
    return _python(_JOB, args, config.parent)


def best_job(repeat: int, *args: Any, **options: Any) -> dict[str, Any]:
    """:func:`job` ``repeat`` times; the run with the highest throughput (as the limit is)."""
    runs = [job(*args, **options) for _ in range(max(1, repeat))]
    return max(runs, key=lambda run: float(run["rows_per_s"]))


def limit(
    config: Path, model: str, source: Path, batch_size: int, rows: int, *, prepared: bool = False
) -> float:
    """The in-process predict_batch ceiling (best of 3 passes over ``rows`` rows).

    With ``prepared``, the rows went through ``Model.prepare`` before the clock started:
    the cost of ``predict_batch`` alone, a stricter reference for models whose
    ``predict_batch`` otherwise prepares each row itself (the tensor runtimes).
    """
    payload = [str(config), model, str(source), batch_size, rows, prepared]
    result = _python(_LIMIT, payload, config.parent)
    return float(result["rows_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--big-rows", type=int, default=10_000_000, help="0 skips the RSS check")
    parser.add_argument("--digits-rows", type=int, default=200_000)
    parser.add_argument("--limit-rows", type=int, default=200_000)
    parser.add_argument(
        "--repeat", type=int, default=2, help="runs of each 1- and 2-worker job; the best counts"
    )
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--no-docs", action="store_true", help="print, do not write the docs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="servinglib-batch-bench-") as work:
        run(args, Path(work))


def run(args: argparse.Namespace, work: Path) -> None:
    """Every scenario, with inputs and outputs under ``work``; prints and writes the table."""
    lines: list[str] = []
    results: dict[str, Any] = {}

    breast = make_breast_cancer(work / "breast.parquet", args.rows)
    digits = make_digits(work / "digits.parquet", args.digits_rows)
    batch = 256  # breast-cancer has no batching: section, so the job's default
    results["bc_limit"] = limit(BREAST, "breast-cancer", breast, batch, args.limit_rows)
    results["bc_1"] = best_job(args.repeat, BREAST, "breast-cancer", breast, work / "o1", workers=1)
    results["bc_2"] = best_job(args.repeat, BREAST, "breast-cancer", breast, work / "o2", workers=2)
    dg_rows = min(args.limit_rows, args.digits_rows)
    results["dg_limit"] = limit(DIGITS, "digits", digits, 32, dg_rows)
    results["dg_prepared"] = limit(DIGITS, "digits", digits, 32, dg_rows, prepared=True)
    results["dg_1"] = best_job(args.repeat, DIGITS, "digits", digits, work / "o3", workers=1)
    if args.big_rows:
        big = make_breast_cancer(work / "big.parquet", args.big_rows)
        results["bc_big"] = job(BREAST, "breast-cancer", big, work / "o4", workers=1)
        big.unlink()
    if not args.skip_ray:
        results["bc_ray"] = job(
            BREAST, "breast-cancer", breast, work / "o5", workers=2, engine="ray",
            cpus_per_worker=1.0,
        )  # fmt: skip

    bc1, bc2, dg1 = results["bc_1"], results["bc_2"], results["dg_1"]
    lines += [
        f"Machine: {platform.processor() or platform.machine()}, 2 cores shared; Python "
        f"{platform.python_version()}, pyarrow {version('pyarrow')}, ray "
        f"{_installed('ray')}. Breast-cancer: {args.rows:,} rows of 30 measurements, batch "
        f"256; digits (ONNX INT8, `runtime: onnx`): {args.digits_rows:,} images, batch 32 "
        f"(its `batching.max_batch_size`). Limits: best of 3 passes; local jobs: best of "
        f"{args.repeat} runs. Written by `python benchmarks/batch.py`.",
        "",
        "| model | run | rows/s | vs reference | peak RSS |",
        "|---|---|---:|---|---:|",
        f"| breast-cancer | in-process `predict_batch` limit | {results['bc_limit']:,.0f} | - | - |",
        f"| breast-cancer | local, 1 worker | {bc1['rows_per_s']:,.0f} | "
        f"{bc1['rows_per_s'] / results['bc_limit']:.2f}x the limit | {bc1['rss_mib']:,.0f} MiB |",
        f"| breast-cancer | local, 2 workers | {bc2['rows_per_s']:,.0f} | "
        f"{bc2['rows_per_s'] / bc1['rows_per_s']:.2f}x 1 worker | "
        f"{bc2['rss_mib']:,.0f} + {bc2['child_rss_mib']:,.0f} MiB (largest worker) |",
        f"| digits | in-process `predict_batch` limit | {results['dg_limit']:,.0f} | - | - |",
        f"| digits | in-process `predict_batch` on rows prepared beforehand | "
        f"{results['dg_prepared']:,.0f} | - | - |",
        f"| digits | local, 1 worker | {dg1['rows_per_s']:,.0f} | "
        f"{dg1['rows_per_s'] / results['dg_limit']:.2f}x the limit, "
        f"{dg1['rows_per_s'] / results['dg_prepared']:.2f}x `predict_batch` alone | "
        f"{dg1['rss_mib']:,.0f} MiB |",
    ]
    if "bc_big" in results:
        big_run = results["bc_big"]
        lines.append(
            f"| breast-cancer | local, 1 worker, {args.big_rows:,} rows | "
            f"{big_run['rows_per_s']:,.0f} | peak RSS {big_run['rss_mib'] / bc1['rss_mib']:.2f}x "
            f"the {args.rows:,}-row job | {big_run['rss_mib']:,.0f} MiB |"
        )
    if "bc_ray" in results:
        ray_run = results["bc_ray"]
        lines.append(
            f"| breast-cancer | Ray engine, new local cluster, 2 actors (end to end) | "
            f"{ray_run['rows_per_s']:,.0f} | {ray_run['rows_per_s'] / bc2['rows_per_s']:.2f}x "
            f"local with 2 workers; fixed start-up {ray_run['startup_s']:.1f} s | - |"
        )
    block = "\n".join([START, *lines, END])
    print(block)
    print(json.dumps(results, indent=2), file=sys.stderr)
    if not args.no_docs:
        write_docs(block)


def _installed(name: str) -> str:
    try:
        return version(name)
    except Exception:
        return "not installed"


def write_docs(block: str) -> None:
    """Replace the batch section of docs/benchmarks.md, or add it at the end."""
    text = DOCS.read_text()
    if START in text:
        text = text[: text.index(START)] + block + text[text.index(END) + len(END) :]
    else:
        text = (
            text.rstrip() + "\n\n## Batch prediction\n\nRun with `python benchmarks/batch.py` (see "
            "[when Ray pays](explanation/batch-prediction.md)).\n\n" + block + "\n"
        )
    DOCS.write_text(text)


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
