"""Unbatched overload at 4x capacity for 30 s: shed early, keep the goodput.

    python benchmarks/reliability.py --seconds 30      # writes its section of docs/benchmarks.md

One unbatched model (tests/fixtures/reliability: ``instances: 1``, 50 ms per call,
``deadline_ms: 300``) on two asyncio workers. Capacity is measured first (closed loop,
4 connections, `hey`), then 4x that rate arrives evenly spaced, each request on a new
connection, whatever the answers (open loop; the two workers share the load as a proxy's
connection pool would spread it).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).parent))
from _load import LoadResult, run_hey
from run import HEADER, ROOT, _machine, start_servinglib, write_docs

SLOW = """  - name: slow
    class: models/misbehaving/model.py:Misbehaving
    repository: models/misbehaving
    default_version: "1"
    instances: 1
    deadline_ms: 300
"""
BODY = {"model_id": "slow", "features": {"sleep_s": 0.05}}
CONNECTIONS = 64


def measure(seconds: float, workdir: Path) -> tuple[LoadResult, LoadResult]:
    """Capacity (closed loop) and 4x capacity (open loop) on the same server."""
    fixture = ROOT / "tests" / "fixtures" / "reliability"
    shutil.copytree(fixture / "models", workdir / "models")
    config = workdir / "servinglib.yaml"
    config.write_text((fixture / "servinglib.yaml").read_text() + SLOW)
    server = start_servinglib(config, workdir, workers=2)
    try:
        url = f"{server.url}/infer"
        run_hey("warm-up", url, BODY, 2, 2)
        capacity = run_hey("capacity (closed loop, 4 connections)", url, BODY, 4, 10)
        rate = 4 * capacity.statuses.get(200, 0) / capacity.seconds
        overload = open_loop(
            f"4x capacity ({rate:.0f} requests/s offered, open loop)", url, rate, seconds
        )
    finally:
        server.stop()
    return capacity, overload


def open_loop(label: str, url: str, rate: float, seconds: float) -> LoadResult:
    """``rate`` requests/s, evenly spaced, each on a new connection, whatever the answers.

    (`hey -q` sends from all its connections on the same tick: bursts of 64 every 400 ms,
    which no deadline shorter than the gap can absorb.)
    """

    def one(_: int) -> tuple[int, float]:
        started = time.monotonic()
        try:
            response = requests.post(url, json=BODY, headers={"Connection": "close"}, timeout=30)
        except requests.RequestException:
            return 0, (time.monotonic() - started) * 1000
        return response.status_code, (time.monotonic() - started) * 1000

    with ThreadPoolExecutor(max_workers=CONNECTIONS) as pool:
        futures = []
        start = time.monotonic()
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(one, i))
        answers = [future.result() for future in futures]
    latencies = sorted(ms for _, ms in answers)
    accepted = sorted(ms for status, ms in answers if status == 200)
    statuses = dict(Counter(status for status, _ in answers))

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")

    return LoadResult(
        label,
        CONNECTIONS,
        len(answers),
        len(answers) / seconds,
        pct(latencies, 0.5),
        pct(latencies, 0.95),
        pct(latencies, 0.99),
        statuses,
        p99_ok_ms=pct(accepted, 0.99),
        max_ms=latencies[-1] if latencies else float("nan"),
        seconds=seconds,
    )


def render(capacity: LoadResult, overload: LoadResult, command: str) -> str:
    """The docs section, between markers."""
    goodput = capacity.statuses.get(200, 0) / capacity.seconds
    accepted = overload.statuses.get(200, 0) / overload.seconds
    errors = sum(v for k, v in overload.statuses.items() if k >= 500 and k not in (503, 504))
    return "\n".join(
        [
            "<!-- bench:overload-unbatched:start -->",
            "### Unbatched overload (two workers, one copy each, 50 ms per call, deadline 300 ms)",
            "",
            f"Command: `{command}`  ",
            f"Machine: {_machine()}.",
            "",
            HEADER,
            capacity.row(),
            overload.row(),
            "",
            f"Capacity {goodput:.1f} answers/s; at 4x for {overload.seconds:.0f} s: goodput "
            f"{accepted:.1f} answers/s (**{accepted / goodput:.0%}** of capacity, target >= 80 %), "
            f"{overload.statuses.get(503, 0)} x 503 with Retry-After, "
            f"{overload.statuses.get(504, 0)} x 504, {errors} other 5xx; p99 of accepted "
            f"requests {overload.p99_ok_ms:.0f} ms.",
            "",
            "<!-- bench:overload-unbatched:end -->",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the 4x run")
    parser.add_argument("--no-docs", action="store_true", help="print only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        capacity, overload = measure(args.seconds, Path(tmp))
    block = render(
        capacity, overload, f"python benchmarks/reliability.py --seconds {args.seconds:g}"
    )
    print(block)
    if not args.no_docs:
        write_docs("overload-unbatched", block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
