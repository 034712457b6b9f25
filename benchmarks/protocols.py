"""MiniLM INT8 over every inference protocol of one server: /infer, v2 JSON and v2 binary.

    python benchmarks/protocols.py [--seconds 8] [--rounds 3] [--baseline DIR]

One servinglib server (2 asyncio workers, dynamic batching, metrics on, access log off as
in benchmarks/minilm.py) answers the same pre-tokenized sentence at concurrency 32 as:

* ``POST /infer``: ``{"model_id": "minilm", "features": {"input_ids": ..., ...}}``;
* ``POST /v2/models/minilm/infer`` with JSON tensors (INT64 inputs, FP32 output as JSON),
  as Triton's HTTP client and ``perf_analyzer`` send them by default;
* the same with the binary tensor extension, inputs and output as raw bytes.

Runs go round-robin (every protocol sees the same moments of a noisy machine) and the median
of ``--rounds`` runs is kept. ``--baseline DIR`` adds a second server started from another
source tree (e.g. ``git archive <commit> | tar -x -C DIR``) to the same rounds, to compare
a change with what it replaces. Results go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _load import LoadResult, Server, free_port, median_of, run_hey
from minilm import MODEL, servinglib_service, tokens
from run import BIN, _env, _machine, write_docs

CONCURRENCY = 32


def bodies(features: dict[str, list[list[int]]]) -> dict[str, tuple[str, Any, dict[str, str]]]:
    """Protocol label -> (path, body, headers), all carrying the same two INT64 tensors."""
    arrays = {name: np.asarray(value, dtype=np.int64) for name, value in features.items()}
    v2_json = {
        "inputs": [
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": "INT64",
                "data": array.reshape(-1).tolist(),
            }
            for name, array in arrays.items()
        ]
    }
    header = {
        "inputs": [
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": "INT64",
                "parameters": {"binary_data_size": array.nbytes},
            }
            for name, array in arrays.items()
        ],
        "outputs": [{"name": "sentence_embedding", "parameters": {"binary_data": True}}],
    }
    head = json.dumps(header).encode()
    binary = head + b"".join(array.astype("<i8").tobytes() for array in arrays.values())
    v2 = "/v2/models/minilm/infer"
    return {
        "/infer": ("/infer", {"model_id": "minilm", "features": features}, {}),
        "v2 JSON": (v2, v2_json, {}),
        "v2 binary": (
            v2,
            binary,
            {
                "Content-Type": "application/octet-stream",
                "Inference-Header-Content-Length": str(len(head)),
            },
        ),
    }


def start(config: Path, workdir: Path, source: Path | None) -> Server:
    port = free_port()
    command = [str(BIN / "servinglib"), "serve", "--config", str(config), "--port", str(port)]
    env = _env(HF_HUB_OFFLINE="1")
    if source is not None:
        env["PYTHONPATH"] = str(source)
    return Server(command, port, "/readyz", workdir, env)


def measure(
    seconds: float, rounds: int, baseline: Path | None
) -> dict[tuple[str, str], LoadResult]:
    """(server, protocol) -> the median run at concurrency 32."""
    features = tokens()
    requests = bodies(features)
    runs: dict[tuple[str, str], list[LoadResult]] = {}
    with tempfile.TemporaryDirectory(prefix="servinglib-protocols-") as tmp:
        workdir = Path(tmp)
        config = servinglib_service(workdir, features)
        servers = {"servinglib": start(config, workdir, None)}
        try:
            if baseline is not None:
                servers["baseline"] = start(config, workdir, baseline)
            for server in servers.values():
                for protocol, (path, body, headers) in requests.items():
                    run_hey(protocol, server.url + path, body, 8, 2, headers=headers)  # warm-up
            for round_ in range(rounds):
                for name, server in servers.items():
                    for protocol, (path, body, headers) in requests.items():
                        label = f"{name}, {protocol}"
                        result = run_hey(
                            label, server.url + path, body, CONCURRENCY, seconds, headers=headers
                        )
                        runs.setdefault((name, protocol), []).append(result)
                        print(f"round {round_ + 1}: {result.row()}", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    return {key: median_of(results) for key, results in runs.items()}


def render(results: dict[tuple[str, str], LoadResult], command: str, baseline: str) -> str:
    infer = results[("servinglib", "/infer")].rps
    lines = [
        "<!-- bench:protocols:start -->",
        "### One model, every protocol: MiniLM INT8 at concurrency 32",
        "",
        f"`{command}` (median of the rounds; {_machine()}). One server, 2 asyncio workers, "
        "batching on; the same sentence as `/infer` features, as v2 JSON tensors and as v2 "
        "binary tensors (output binary too).",
        "",
        "| server | protocol | requests/s | vs /infer | p50 ms | p95 ms | p99 ms | statuses |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for (server, protocol), r in results.items():
        label = f"{server} ({baseline})" if server == "baseline" else server
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(r.statuses.items()))
        lines.append(
            f"| {label} | {protocol} | {r.rps:,.0f} | {r.rps / infer:.2f}x | {r.p50_ms:.2f} | "
            f"{r.p95_ms:.2f} | {r.p99_ms:.2f} | {codes} |"
        )
    lines += ["", "<!-- bench:protocols:end -->"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each load run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median kept)")
    parser.add_argument("--baseline", type=Path, help="another source tree to serve alongside")
    parser.add_argument(
        "--baseline-label", default="before", help="how the table names the baseline"
    )
    parser.add_argument("--no-docs", action="store_true", help="print only")
    args = parser.parse_args()
    if not (MODEL / "model.onnx").is_file():
        raise SystemExit(
            f"{MODEL}/model.onnx is missing: run python examples/sentence-embeddings/prepare.py"
        )
    command = ("python benchmarks/protocols.py " + shlex.join(sys.argv[1:])).strip()
    results = measure(args.seconds, args.rounds, args.baseline)
    block = render(results, command, args.baseline_label)
    if not args.no_docs:
        write_docs("protocols", block)
    print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
