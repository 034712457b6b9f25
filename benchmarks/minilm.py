"""MiniLM INT8 served side by side: in-process limit, servinglib (batching), seed FastAPI, naive Flask.

    python benchmarks/minilm.py [--seconds 10]

Every server gets the same pre-tokenized sentence, from `hey` on the same machine. Results
go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _load import LoadResult, Server, free_port, run_hey
from run import BIN, ROOT, _env, _machine, write_docs

MODEL = ROOT / "examples/sentence-embeddings/models/minilm/2"
SENTENCE = "The quick brown fox jumps over the lazy dog while the server batches requests for speed"
CONCURRENCY = (1, 8, 32, 64)


def tokens() -> dict[str, list[list[int]]]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    encoding = tokenizer.encode(SENTENCE)
    return {"input_ids": [encoding.ids], "attention_mask": [encoding.attention_mask]}


def in_process(features: dict[str, list[list[int]]], threads: int) -> dict[str, float]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(
        str(MODEL / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    single = {k: np.asarray(v, dtype=np.int64) for k, v in features.items()}
    for _ in range(50):
        session.run(None, single)
    times = []
    for _ in range(300):
        start = time.perf_counter()
        session.run(None, single)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    best = 0.0
    for batch in (1, 8, 16, 32, 64):
        batched = {k: np.repeat(v, batch, axis=0) for k, v in single.items()}
        session.run(None, batched)
        start, runs = time.perf_counter(), 0
        while time.perf_counter() - start < 2:
            session.run(None, batched)
            runs += 1
        best = max(best, runs * batch / (time.perf_counter() - start))
    return {"p50": statistics.median(times), "p95": times[int(0.95 * len(times)) - 1], "best": best}


def servinglib_service(workdir: Path, features: dict[str, list[list[int]]]) -> Path:
    import onnxruntime as ort

    version = workdir / "minilm" / "models" / "1"
    version.mkdir(parents=True)
    shutil.copy(MODEL / "model.onnx", version / "model.onnx")
    session = ort.InferenceSession(str(version / "model.onnx"), providers=["CPUExecutionProvider"])
    expected = session.run(None, {k: np.asarray(v, dtype=np.int64) for k, v in features.items()})[0]
    (version / "test_data.json").write_text(
        json.dumps(
            {
                "cases": [
                    {
                        "input": features,
                        "expected": {"sentence_embedding": expected.tolist()},
                        "tolerance": {"atol": 1e-3},
                    }
                ]
            }
        )
    )
    config = workdir / "minilm" / "servinglib.yaml"
    config.write_text(
        "service: bench-minilm\nserver: {workers: 2, threads: 32, log_level: warning}\n"
        "models:\n  - name: minilm\n    runtime: onnx\n    repository: models\n    default_version: '1'\n"
        "    batching: {max_batch_size: 32, max_queue_delay_us: 2000, max_queue_size: 256}\n"
    )
    return config


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    features = tokens()
    body = {"model_id": "minilm", "features": features}
    limit = in_process(features, threads=2)
    results: dict[str, list[LoadResult]] = {}
    with tempfile.TemporaryDirectory(prefix="servinglib-minilm-") as tmp:
        workdir = Path(tmp)
        env = _env(BENCH_ONNX=str(MODEL / "model.onnx"), BENCH_THREADS="2")
        starts = {
            "servinglib (2 workers, batching)": lambda: _servinglib(
                servinglib_service(workdir, features), workdir
            ),
            "seed FastAPI + ThreadPoolExecutor(8)": lambda: _peer(
                [
                    str(BIN / "uvicorn"),
                    "--log-level",
                    "warning",
                    "--port",
                    "{port}",
                    "benchmarks.peers.onnx_apps:fastapi_app",
                ],
                workdir,
                env,
            ),
            "naive Flask + gunicorn (gthread 8)": lambda: _peer(
                [
                    str(BIN / "gunicorn"),
                    "-k",
                    "gthread",
                    "--threads",
                    "8",
                    "-b",
                    "127.0.0.1:{port}",
                    "--log-level",
                    "warning",
                    "benchmarks.peers.onnx_apps:flask_app",
                ],
                workdir,
                env,
            ),
        }
        for label, start in starts.items():
            server = start()
            try:
                run_hey(label, f"{server.url}/infer", body, 8, 2)
                runs = [
                    run_hey(label, f"{server.url}/infer", body, c, args.seconds)
                    for c in CONCURRENCY
                ]
                if label.startswith("servinglib"):  # a lone request right after a burst
                    runs.append(
                        run_hey(
                            label + ", c=1 after c=32", f"{server.url}/infer", body, 1, args.seconds
                        )
                    )
                results[label] = runs
            finally:
                server.stop()
    command = "python benchmarks/minilm.py " + " ".join(sys.argv[1:])
    block = render(limit, results, command, len(features["input_ids"][0]))
    write_docs("minilm", block)
    print(block)
    return 0


def _servinglib(config: Path, workdir: Path) -> Server:
    port = free_port()
    return Server(
        [str(BIN / "servinglib"), "serve", "--config", str(config), "--port", str(port)],
        port,
        "/readyz",
        workdir,
        _env(),
    )


def _peer(command: list[str], workdir: Path, env: dict[str, str]) -> Server:
    port = free_port()
    return Server([part.replace("{port}", str(port)) for part in command], port, "/", workdir, env)


def render(
    limit: dict[str, float], results: dict[str, list[LoadResult]], command: str, length: int
) -> str:
    ours = results["servinglib (2 workers, batching)"]
    by_c = {r.concurrency: r for r in ours[: len(CONCURRENCY)]}
    seed = {r.concurrency: r for r in results["seed FastAPI + ThreadPoolExecutor(8)"]}
    flask = {r.concurrency: r for r in results["naive Flask + gunicorn (gthread 8)"]}
    rows = [r.row() for runs in results.values() for r in runs]
    lines = [
        "<!-- bench:minilm:start -->",
        f"### MiniLM INT8 served (the same pre-tokenized {length}-token sentence to every server)",
        "",
        f"Command: `{command.strip()}`  ",
        f"Machine: {_machine()}.",
        "",
        f"In-process limit (ONNX Runtime, 2 intra-op threads): single request p50 {limit['p50']:.2f} ms, "
        f"p95 {limit['p95']:.2f} ms; best batched throughput {limit['best']:.0f} sequences/s.",
        "",
        "| setup | concurrency | requests/s | p50 ms | p95 ms | p99 ms | statuses |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"At concurrency 32: servinglib / in-process best = **{by_c[32].rps / limit['best']:.2f}x** (bar 0.8); "
        f"/ seed FastAPI = **{by_c[32].rps / seed[32].rps:.2f}x**; / naive Flask = "
        f"**{by_c[32].rps / flask[32].rps:.2f}x** (bar 1.5). At concurrency 1: servinglib p95 "
        f"{by_c[1].p95_ms:.2f} ms vs in-process {limit['p95']:.2f} ms + 2 ms; right after concurrency 32: "
        f"{ours[-1].p95_ms:.2f} ms.",
        "",
        "<!-- bench:minilm:end -->",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
