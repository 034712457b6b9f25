"""The XGBoost example served by servinglib beside MLServer's XGBoost runtime, and its limit.

One run measures, with the model of ``examples/tabular`` (``diabetes-xgb``: 300 trees of
depth 2, 10 features), one patient per request as v2 JSON (an FP32 ``[1, 10]`` tensor):

1. servinglib (``runtime: xgboost``, 2 gunicorn workers, batched by default) at c=1 and
   c=32, and the mean batch size its batcher ran at c=32 (``servinglib_batch_size``);
2. the in-process limit: ``Booster.inplace_predict`` in a loop on batches of that mean
   size, rows per second, with the threads the server gives each call;
3. with ``--mlserver VENV_BIN``: MLServer 1.7.1 with ``mlserver-xgboost`` in that
   virtualenv (``pip install -r benchmarks/peers/requirements-mlserver.txt`` then
   ``pip install --no-deps mlserver-xgboost==1.7.1 xgboost-cpu scipy``), inference in the
   server process or in worker processes (``parallel_workers``) and with or without adaptive
   batching, each setting at c=1 and c=32; the best is stated.

Usage::

    python benchmarks/tabular.py --seconds 10 [--mlserver /path/to/venv/bin]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
from _load import LoadResult, Server, free_port, run_hey

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tabular"
MODEL_DIR = EXAMPLE / "models" / "diabetes_xgb" / "1"
WORKERS = 2

# One held-out patient's ten features, as the example's README sends them.
ROW = [0.038, 0.051, 0.062, 0.022, -0.044, -0.035, -0.043, -0.003, 0.020, -0.018]


def v2_body(name: str) -> dict[str, object]:
    return {"inputs": [{"name": name, "datatype": "FP32", "shape": [1, 10], "data": ROW}]}


def bench_servinglib(seconds: float) -> tuple[LoadResult, LoadResult, float]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "generator")])}
    command = [sys.executable, "-m", "servinglib.cli.main", "serve", "--config"]
    command += [str(EXAMPLE / "servinglib.yaml"), "--port", str(port)]
    command += ["--workers", str(WORKERS), "--host", "127.0.0.1"]
    server = Server(command, port, "/readyz", Path(tempfile.mkdtemp()), env)
    try:
        _wait_ready(server.url)
        url = server.url + "/v2/models/diabetes-xgb/infer"
        body = v2_body("input")
        run_hey("warm-up", url, body, 8, 2)
        one = run_hey("servinglib", url, body, 1, seconds)
        before = _metric_totals(server.url)
        many = run_hey("servinglib", url, body, 32, seconds)
        after = _metric_totals(server.url)
        batches = after[1] - before[1]
        mean_batch = (after[0] - before[0]) / batches if batches else float("nan")
        return one, many, mean_batch
    finally:
        server.stop()


def _metric_totals(url: str) -> tuple[float, float]:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    found = []
    for part in ("sum", "count"):
        pattern = rf'^servinglib_batch_size_{part}{{[^}}]*model="diabetes-xgb"[^}}]*}} (\S+)$'
        found.append(sum(float(v) for v in re.findall(pattern, text, re.MULTILINE)))
    return found[0], found[1]


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("servinglib not ready after 300 s")


def bench_in_process(batch: int, seconds: float) -> float:
    """Rows per second of ``inplace_predict`` on ``batch`` rows, threads as one worker's."""
    import xgboost

    from servinglib.runtimes._tensors import default_threads

    booster = xgboost.Booster(model_file=str(MODEL_DIR / "model.json"))
    booster.set_param({"nthread": default_threads(WORKERS)})
    rows = np.tile(np.asarray(ROW, dtype=np.float32), (max(1, batch), 1))
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        booster.inplace_predict(rows, validate_features=False)
        calls += 1
    return calls * len(rows) / (time.perf_counter() - started)


MLSERVER_SETTINGS = (  # (label, parallel_workers, max_batch_size, max_batch_time s)
    ("in process, no batching", 0, 1, 0.0),
    ("in process, adaptive batching 32 / 2 ms", 0, 32, 0.002),
    ("2 workers, no batching", 2, 1, 0.0),
    ("2 workers, adaptive batching 32 / 2 ms", 2, 32, 0.002),
)


def bench_mlserver(venv_bin: Path, seconds: float) -> list[tuple[str, LoadResult, LoadResult]]:
    results = []
    for label, workers, max_batch, max_time in MLSERVER_SETTINGS:
        root = Path(tempfile.mkdtemp(prefix="mlserver-xgb-"))
        port = free_port()
        settings = {
            "debug": False,
            "host": "127.0.0.1",
            "http_port": port,
            "grpc_port": free_port(),
            "metrics_endpoint": None,
            "parallel_workers": workers,
        }
        (root / "settings.json").write_text(json.dumps(settings))
        model = root / "diabetes-xgb"
        model.mkdir()
        (model / "model.json").write_bytes((MODEL_DIR / "model.json").read_bytes())
        model_settings = {
            "name": "diabetes-xgb",
            "implementation": "mlserver_xgboost.XGBoostModel",
            "parameters": {"uri": "./model.json"},
            "max_batch_size": max_batch,
            "max_batch_time": max_time,
        }
        (model / "model-settings.json").write_text(json.dumps(model_settings))
        env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}
        env.pop("PYTHONPATH", None)
        command = [str(venv_bin / "mlserver"), "start", str(root)]
        server = Server(command, port, "/v2/models/diabetes-xgb/ready", root, env)
        try:
            _wait_model(server.url)
            url = server.url + "/v2/models/diabetes-xgb/infer"
            body = v2_body("input-0")
            run_hey("warm-up", url, body, 8, 2)
            one = run_hey(f"MLServer, {label}", url, body, 1, seconds)
            many = run_hey(f"MLServer, {label}", url, body, 32, seconds)
            results.append((label, one, many))
        finally:
            server.stop()
    return results


def _wait_model(url: str) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/v2/models/diabetes-xgb/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("MLServer not ready after 300 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per load run")
    parser.add_argument("--mlserver", type=Path, help="bin/ of a venv with mlserver-xgboost")
    args = parser.parse_args()
    from servinglib.testing import import_file

    import_file(EXAMPLE / "prepare.py").main([])
    one, many, mean_batch = bench_servinglib(args.seconds)
    limit = bench_in_process(round(mean_batch), args.seconds)
    print(f"cores: {len(os.sched_getaffinity(0))}, servinglib workers: {WORKERS}")
    print("| server | c | requests/s | p50 ms | p95 ms | p99 ms | statuses |")
    print("|---|---|---|---|---|---|---|")
    print(one.row())
    print(many.row())
    if args.mlserver is not None:
        for _, ml_one, ml_many in bench_mlserver(args.mlserver, args.seconds):
            print(ml_one.row())
            print(ml_many.row())
    print(f"servinglib mean batch at c=32: {mean_batch:.2f} requests")
    print(
        f"in-process inplace_predict at batch {round(mean_batch)}: {limit:,.0f} rows/s "
        f"(one process, {WORKERS} workers' threads each); servinglib at c=32: "
        f"{many.rps:,.0f} rows/s = {many.rps / limit:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
