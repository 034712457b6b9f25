"""Open Inference over gRPC beside v2 binary REST, one server, one client: perf_analyzer.

    python benchmarks/grpc.py --perf-analyzer DIR [--seconds 2] [--rounds 3] [--no-docs]
        [--one-connection-per-context] [--async-clients]

``DIR`` holds ``bin/perf_analyzer`` and ``lib/`` (what ``tests/integration/_tools.py``
builds into its cache from the tritonclient 2.50.0 wheel). One servinglib server (2 asyncio
workers, ``server.grpc_port`` set) serves both protocols; Triton's ``perf_analyzer`` drives
it with ``-i http`` (binary tensors in and out) and ``-i grpc`` (raw contents), in turns.
perf_analyzer's HTTP client opens one connection per context; its gRPC client runs as it
comes, six contexts sharing a channel (one HTTP/2 connection). The kernel hands each
connection to a worker by a hash, and the server's connection balance evens them out
(20:13 of 33 connections before it, in one run). ``--one-connection-per-context`` sets
``TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT=1`` instead, which costs the client more CPU
per call (408-423 us against 279-293 us at concurrency 32), on the same two cores as the
server. Worker and client CPU per request (from /proc and the client's rusage) are
reported beside requests/s. Setups:

* MiniLM INT8 (``runtime: onnx``, dynamic batching; needs
  ``python examples/sentence-embeddings/prepare.py``) with the benchmark sentence's token
  ids, at concurrency 32 and 1;
* the trivial model (sum of 16 floats, ``benchmarks/services/trivial``, its inputs declared)
  at concurrency 8.

``--async-clients`` runs both clients in perf_analyzer's asynchronous mode (``-a``) and writes
its own section of the docs: which protocol leads depends on the client's mode, since the
client shares the server's two cores.

Each round runs every (setup, protocol) once, starting with the other protocol each round;
each row is the median run, each ratio the median of the per-round ratios gRPC / REST.
Results go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _load import Server, free_port
from minilm import MODEL, servinglib_service, tokens
from run import BIN, ROOT, _env, _machine, write_docs

TRIVIAL = ROOT / "benchmarks/services/trivial"
CLIENT_ENV: dict[str, dict[str, str]] = {"http": {}, "grpc": {}}  # perf_analyzer's defaults
CLIENT_OPTIONS: list[str] = []  # ["-a"]: both clients in perf_analyzer's asynchronous mode
ONE_CONNECTION_PER_CONTEXT = {"TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT": "1"}
TRIVIAL_TENSORS = """    inputs: [{name: values, datatype: FP32, shape: [16]}]
    outputs: [{name: sum, datatype: FP64, shape: [1]}]
"""


@dataclass(frozen=True)
class Run:
    """One perf_analyzer window set: throughput and client-side latency percentiles."""

    rps: float
    p50_ms: float
    p99_ms: float
    server_us: float = 0.0  # worker CPU per request (every server process, from /proc)
    client_us: float = 0.0  # perf_analyzer's CPU per request


@dataclass(frozen=True)
class Setup:
    """A model at one concurrency, and the perf_analyzer options its inputs need."""

    label: str
    model: str
    concurrency: int
    options: tuple[str, ...]


def start(config: Path, workdir: Path) -> tuple[Server, int]:
    port, grpc_port = free_port(), free_port()
    command = [str(BIN / "servinglib"), "serve", "--config", str(config), "--port", str(port)]
    env = _env(HF_HUB_OFFLINE="1", SERVINGLIB_GRPC_PORT=str(grpc_port))
    return Server(command, port, "/readyz", workdir, env), grpc_port


def answered(server: Server, protocol: str) -> float:
    """Requests the server answered so far over ``protocol`` (its /metrics)."""
    label = "grpc" if protocol == "grpc" else "v2"
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=30).read()
    pattern = rf'servinglib_requests_total{{[^}}]*protocol="{label}"[^}}]*}} ([0-9.e+]+)'
    return sum(float(value) for value in re.findall(pattern, text.decode()))


def measured(
    tool: Path, setup: Setup, server: Server, address: str, protocol: str, seconds: float
) -> Run:
    """A perf_analyzer run with the worker and client CPU per request it cost."""
    count, cpu = answered(server, protocol), server.cpu_s()
    client = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = perf(tool, setup, address, protocol, seconds)
    requests = max(1.0, answered(server, protocol) - count)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_s = after.ru_utime + after.ru_stime - client.ru_utime - client.ru_stime
    return dataclasses.replace(
        run,
        server_us=1e6 * (server.cpu_s() - cpu) / requests,
        client_us=1e6 * client_s / requests,
    )


def perf(tool: Path, setup: Setup, address: str, protocol: str, seconds: float) -> Run:
    """One run of perf_analyzer; fails loudly when any request failed."""
    with tempfile.NamedTemporaryFile(suffix=".csv") as report:
        formats = ("--input-tensor-format", "binary", "--output-tensor-format", "binary")
        command = [
            str(tool / "bin" / "perf_analyzer"),
            *("-m", setup.model, "-u", address, "-i", protocol),
            *("--concurrency-range", str(setup.concurrency)),
            *("-p", str(int(seconds * 1000)), "--max-trials", "8"),
            *("--stability-percentage", "999", "-f", report.name),
            *(formats if protocol == "http" else ()),
            *CLIENT_OPTIONS,
            *setup.options,
        ]
        env = {**os.environ, "LD_LIBRARY_PATH": str(tool / "lib"), **CLIENT_ENV[protocol]}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise SystemExit(
                f"perf_analyzer -i {protocol} ({setup.label}, concurrency {setup.concurrency}) "
                f"failed:\n{done.stdout}\n{done.stderr}"
            )
        row = next(csv.DictReader(Path(report.name).read_text().splitlines()))
    return Run(
        float(row["Inferences/Second"]),
        float(row["p50 latency"]) / 1000,
        float(row["p99 latency"]) / 1000,
    )


def setups(workdir: Path) -> list[tuple[Path, list[Setup]]]:
    """(config, setups) per server: MiniLM when prepared, and the trivial model."""
    served: list[tuple[Path, list[Setup]]] = []
    if (MODEL / "model.onnx").is_file():
        features = tokens()
        ids, mask = features["input_ids"][0], features["attention_mask"][0]
        data = workdir / "minilm-data.json"
        sample = {
            "input_ids": {"content": ids, "shape": [len(ids)]},
            "attention_mask": {"content": mask, "shape": [len(mask)]},
        }
        data.write_text(json.dumps({"data": [sample]}))
        options = ("--input-data", str(data))
        config = servinglib_service(workdir, features)
        served.append(
            (
                config,
                [
                    Setup("MiniLM INT8", "minilm", 32, options),
                    Setup("MiniLM INT8", "minilm", 1, options),
                ],
            )
        )
    trivial = workdir / "trivial"
    shutil.copytree(TRIVIAL, trivial)
    text = (
        (trivial / "servinglib.yaml").read_text().replace("log_level: info", "log_level: warning")
    )
    (trivial / "servinglib.yaml").write_text(text + TRIVIAL_TENSORS)
    served.append(
        (trivial / "servinglib.yaml", [Setup("trivial", "summer16", 8, ("--input-data", "zero"))])
    )
    return served


Runs = dict[tuple[str, int, str], list[Run]]


def measure(tool: Path, seconds: float, rounds: int) -> Runs:
    runs: Runs = {}
    with tempfile.TemporaryDirectory(prefix="servinglib-grpc-bench-") as tmp:
        workdir = Path(tmp)
        for config, chosen in setups(workdir):
            server, grpc_port = start(config, workdir)
            addresses = {"http": f"127.0.0.1:{server.port}", "grpc": f"127.0.0.1:{grpc_port}"}
            try:
                for setup in chosen:  # warm-up
                    for protocol, address in addresses.items():
                        perf(tool, setup, address, protocol, 2.0)
                for round_ in range(rounds):
                    order = list(addresses) if round_ % 2 == 0 else list(addresses)[::-1]
                    for setup in chosen:
                        for protocol in order:
                            address = addresses[protocol]
                            run = measured(tool, setup, server, address, protocol, seconds)
                            key = (setup.label, setup.concurrency, protocol)
                            runs.setdefault(key, []).append(run)
                            print(f"round {round_ + 1}: {key}: {run}", flush=True)
            finally:
                server.stop()
    return runs


CONNECTIONS = {
    True: "perf_analyzer's gRPC client as it comes: six contexts share one HTTP/2 connection; "
    "its HTTP client has one connection per context. The server spreads the connections "
    "over its workers.",
    False: "Every context has its own connection under both protocols (the gRPC client runs "
    "with `TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT=1`).",
}


ASYNC_CLIENTS = (
    " Both clients in perf_analyzer's asynchronous mode (`-a`): a few threads drive every "
    "context, instead of a thread per context waiting on each call."
)


def section() -> str:
    """The docs section of this run's client mode."""
    return "grpc-async" if CLIENT_OPTIONS else "grpc"


def render(runs: Runs, command: str, load: tuple[float, float], shared: bool) -> str:
    name = section()
    lines = [
        f"<!-- bench:{name}:start -->",
        "### Open Inference over gRPC beside v2 binary REST"
        + (", asynchronous clients" if CLIENT_OPTIONS else ""),
        "",
        f"Command: `{command}`  ",
        "Machine: "
        + _machine().replace("`hey`", "`perf_analyzer` (tritonclient 2.50.0)")
        + f". Load average (1 min) {load[0]:.1f} before, {load[1]:.1f} after the runs.",
        "",
        "One server, 2 asyncio workers, REST and gRPC on their own ports; `perf_analyzer -i "
        "http` (binary tensors in and out) and `-i grpc` (raw contents) in turns. Each row is "
        "the median run; *gRPC / REST* is the median over rounds of the ratio of requests/s. "
        + CONNECTIONS[shared]
        + (ASYNC_CLIENTS if CLIENT_OPTIONS else "")
        + " Worker CPU: every server process, from /proc; client CPU: perf_analyzer's; both "
        "per request answered (the server's request counter). The client runs on the same "
        "two cores as the server, so what it spends, the server does not get.",
        "",
        "| model | concurrency | protocol | requests/s | gRPC / REST | p50 ms | p99 ms "
        "| worker CPU us/request | client CPU us/request |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (label, concurrency, protocol), results in runs.items():
        median = sorted(results, key=lambda r: r.rps)[len(results) // 2]
        rest = runs[(label, concurrency, "http")]
        ratio = statistics.median(a.rps / b.rps for a, b in zip(results, rest, strict=True))
        shown = "v2 binary REST" if protocol == "http" else "gRPC"
        lines.append(
            f"| {label} | {concurrency} | {shown} | {median.rps:,.0f} | {ratio:.2f}x | "
            f"{median.p50_ms:.2f} | {median.p99_ms:.2f} | "
            f"{statistics.median(r.server_us for r in results):,.0f} | "
            f"{statistics.median(r.client_us for r in results):,.0f} |"
        )
    lines += ["", f"<!-- bench:{name}:end -->"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--perf-analyzer", type=Path, required=True, help="bin/ and lib/ dir")
    parser.add_argument("--seconds", type=float, default=2.0, help="perf_analyzer window")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--no-docs", action="store_true", help="print only")
    parser.add_argument(
        "--one-connection-per-context",
        action="store_true",
        help="TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT=1 (the gRPC client's CPU grows)",
    )
    parser.add_argument(
        "--async-clients",
        action="store_true",
        help="perf_analyzer -a for both protocols (results go to their own docs section)",
    )
    args = parser.parse_args()
    command = ("python benchmarks/grpc.py " + shlex.join(sys.argv[1:])).strip()
    before = os.getloadavg()[0]
    if args.one_connection_per_context:
        CLIENT_ENV["grpc"] = ONE_CONNECTION_PER_CONTEXT
    if args.async_clients:
        CLIENT_OPTIONS.append("-a")
    runs = measure(args.perf_analyzer, args.seconds, args.rounds)
    load = (before, os.getloadavg()[0])
    block = render(runs, command, load, not args.one_connection_per_context)
    if not args.no_docs:
        write_docs(section(), block)
    print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
