"""MiniLM INT8 over every inference protocol of one server: /infer, v2 JSON and v2 binary.

    python benchmarks/protocols.py [--seconds 8] [--rounds 3] [--baseline DIR]

One servinglib server (2 asyncio workers, dynamic batching, metrics on, access log off as
in benchmarks/minilm.py) answers the same pre-tokenized sentence at concurrency 32 as:

* ``POST /infer``: ``{"model_id": "minilm", "features": {"input_ids": ..., ...}}``;
* ``POST /v2/models/minilm/infer`` with JSON tensors (INT64 inputs, FP32 output as JSON),
  as Triton's HTTP client and ``perf_analyzer`` send them by default;
* the same with the binary tensor extension, inputs and output as raw bytes.

Runs go round-robin, each round starting with another protocol and alternating the servers;
each row is the median of ``--rounds`` runs, each ratio the median of the per-round ratios.
``--baseline DIR`` adds a second server started from another source tree (e.g.
``git archive <commit> servinglib | tar -x -C DIR``) to the same rounds, to compare a change
with what it replaces. Results go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
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


Runs = dict[tuple[str, str], list[LoadResult]]  # (server, protocol) -> one run per round


def measure(seconds: float, rounds: int, baseline: Path | None) -> Runs:
    """Every (server, protocol) once per round at concurrency 32.

    Each round starts with another protocol and alternates the servers, so no protocol is
    always the one that runs right after another's connections closed, and a slow spell of
    the machine falls on every setup alike.
    """
    features = tokens()
    requests = bodies(features)
    protocols = list(requests)
    runs: Runs = {}
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
                turn = round_ % len(protocols)
                for protocol in protocols[turn:] + protocols[:turn]:
                    names = list(servers) if round_ % 2 == 0 else list(servers)[::-1]
                    for name in names:
                        path, body, headers = requests[protocol]
                        result = run_hey(
                            f"{name}, {protocol}",
                            servers[name].url + path,
                            body,
                            CONCURRENCY,
                            seconds,
                            headers=headers,
                        )
                        runs.setdefault((name, protocol), []).append(result)
                        print(f"round {round_ + 1}: {result.row()}", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    return runs


def render(runs: Runs, command: str, baseline: str) -> str:
    """The table: median run of each setup, and each protocol's ratio to /infer.

    The ratio is the median over rounds of the ratio within a round (the same server, runs
    a few seconds apart), steadier on a noisy machine than a ratio of medians.
    """
    name = "protocols" if ("baseline", "/infer") not in runs else "protocols-before"
    title = "One model, every protocol: MiniLM INT8 at concurrency 32"
    if name == "protocols-before":
        title += f", beside servinglib {baseline}"
    lines = [
        f"<!-- bench:{name}:start -->",
        f"### {title}",
        "",
        f"Command: `{command}`  ",
        f"Machine: {_machine()}.",
        "",
        "One server, 2 asyncio workers, batching on; the same sentence as `/infer` features, "
        "as v2 JSON tensors and as v2 binary tensors (the output binary too). Each row is "
        "the median run; *vs /infer* is the median over rounds of the ratio to the same "
        "server's `/infer` run of that round.",
        "",
        "| server | protocol | requests/s | vs /infer | p50 ms | p95 ms | p99 ms | statuses |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for (server, protocol), results in runs.items():
        r = median_of(results)
        infer = runs[(server, "/infer")]
        ratio = statistics.median(a.rps / b.rps for a, b in zip(results, infer, strict=True))
        label = f"servinglib {baseline}" if server == "baseline" else server
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(r.statuses.items()))
        lines.append(
            f"| {label} | {protocol} | {r.rps:,.0f} | {ratio:.2f}x | {r.p50_ms:.2f} | "
            f"{r.p95_ms:.2f} | {r.p99_ms:.2f} | {codes} |"
        )
    if ("baseline", "/infer") in runs:
        now, before = runs[("servinglib", "/infer")], runs[("baseline", "/infer")]
        change = statistics.median(a.rps / b.rps for a, b in zip(now, before, strict=True))
        lines += ["", f"`/infer` against servinglib {baseline}: **{change:.2f}x**."]
    lines += ["", f"<!-- bench:{name}:end -->"]
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
    runs = measure(args.seconds, args.rounds, args.baseline)
    block = render(runs, command, args.baseline_label)
    if not args.no_docs:
        write_docs(block.split(":", 2)[1], block)  # the section named in the first marker
    print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
