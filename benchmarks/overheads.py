"""The measurements behind servinglib's serving defaults; results go to docs/benchmarks.md.

    python benchmarks/overheads.py [--seconds 6] [--repeats 3]

* encoding a 384-float answer: the standard library (after converting to Python floats)
  against servinglib.wire.jsonbytes (orjson);
* CPU per request of the trivial model with the JSON access log off and on (CPU time of the
  gunicorn workers from /proc, divided by the requests answered), runs alternating;
* MiniLM at concurrency 1 with and without batching: what a lone request pays for batching.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _load import LoadResult, run_hey
from minilm import _servinglib, servinglib_service, tokens
from run import ROOT, TRIVIAL_BODY, _machine, start_servinglib, write_docs

from servinglib.wire import jsonbytes


def encoding_us() -> tuple[float, float]:
    """Microseconds to encode one 384-float embedding answer: json (+ to_plain), orjson."""
    answer = {"output": {"embedding": np.random.default_rng(0).random((1, 384), np.float32)}}
    n = 2000

    def stdlib() -> bytes:
        return json.dumps(jsonbytes.to_plain(answer), allow_nan=False).encode()

    slow = min(timeit.repeat(stdlib, number=n, repeat=5)) / n * 1e6
    fast = min(timeit.repeat(lambda: jsonbytes.dumps(answer), number=n, repeat=5)) / n * 1e6
    return slow, fast


def _cpu_ticks(pid: str) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def trivial_cpu(seconds: float, repeats: int, workdir: Path) -> dict[str, list[float]]:
    """CPU microseconds per request of the trivial model, access log off and on."""
    servers = {}
    for level in ("warning", "info"):
        service = workdir / f"trivial-{level}"
        shutil.copytree(ROOT / "benchmarks/services/trivial", service)
        config = service / "servinglib.yaml"
        text = config.read_text()
        config.write_text(text.replace("log_level: info", f"log_level: {level}"))
        servers[level] = start_servinglib(config, workdir)
    per_request: dict[str, list[float]] = {"warning": [], "info": []}
    try:
        for level, server in servers.items():
            run_hey(level, f"{server.url}/infer", TRIVIAL_BODY, 8, 2)
        for _ in range(repeats):
            for level, server in servers.items():
                workers = subprocess.run(
                    ["pgrep", "-P", str(server.process.pid)],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.split()
                before = sum(_cpu_ticks(p) for p in workers)
                result = run_hey(level, f"{server.url}/infer", TRIVIAL_BODY, 8, seconds)
                ticks = sum(_cpu_ticks(p) for p in workers) - before
                per_request[level].append(ticks / 100 * 1e6 / result.requests)
    finally:
        for server in servers.values():
            server.stop()
    return per_request


def lone_request(seconds: float, workdir: Path) -> dict[str, LoadResult]:
    """MiniLM at concurrency 1, with and without batching."""
    features = tokens()
    body = {"model_id": "minilm", "features": features}
    results = {}
    for batching in (True, False):
        service = workdir / ("batching" if batching else "direct")
        service.mkdir()
        config = servinglib_service(service, features)
        if not batching:
            lines = config.read_text().splitlines(keepends=True)
            config.write_text("".join(line for line in lines if "batching:" not in line))
        server = _servinglib(config, service)
        try:
            run_hey("warm-up", f"{server.url}/infer", body, 1, 2)
            label = "with batching" if batching else "without batching"
            results[label] = run_hey(label, f"{server.url}/infer", body, 1, seconds)
        finally:
            server.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    slow, fast = encoding_us()
    with tempfile.TemporaryDirectory(prefix="servinglib-overheads-") as tmp:
        cpu = trivial_cpu(args.seconds, args.repeats, Path(tmp))
        lone = lone_request(args.seconds, Path(tmp))
    off, on = statistics.median(cpu["warning"]), statistics.median(cpu["info"])
    command = ("python benchmarks/overheads.py " + " ".join(sys.argv[1:])).strip()
    lines = [
        "<!-- bench:overheads:start -->",
        "### What the serving defaults cost (the measurements behind them)",
        "",
        f"Command: `{command}`  ",
        f"Machine: {_machine()}.",
        "",
        "| measurement | result |",
        "|---|---|",
        f"| encode a 384-float answer: `json.dumps` after converting to Python floats | "
        f"{slow:.1f} us |",
        f"| the same with `servinglib.wire.jsonbytes` (orjson, arrays written directly) | "
        f"{fast:.1f} us ({slow / fast:.0f}x faster) |",
        f"| trivial model, CPU per request, JSON access log off (median of {args.repeats}, "
        f"alternating) | {off:.0f} us |",
        f"| the same with the access log on (written by a background thread) | {on:.0f} us "
        f"(+{on - off:.0f} us) |",
    ]
    for label, result in lone.items():
        lines.append(
            f"| MiniLM INT8, one client, {label} | p50 {result.p50_ms:.2f} ms, p95 "
            f"{result.p95_ms:.2f} ms, p99 {result.p99_ms:.2f} ms |"
        )
    lines += [
        "",
        "Both servers use the default asyncio worker, which never runs a model on its event "
        "loop: a lone batched request is handed to the batcher thread and back, an unbatched "
        "one to a pool thread and back; the last two rows show what batching costs it. See "
        "[where the time goes](explanation/performance.md).",
        "",
        "<!-- bench:overheads:end -->",
    ]
    block = "\n".join(lines)
    write_docs("overheads", block)
    print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
