"""Unbatched overload at 4x capacity: shed early, keep the goodput, on both worker classes.

    python benchmarks/reliability.py --seconds 60      # writes its section of docs/benchmarks.md

One unbatched model (tests/fixtures/reliability: ``instances: 1``, 50 ms per call,
``deadline_ms: 1000``) on two workers, under each worker class. Capacity is measured first
(closed loop, 16 clients, a new connection per request; 8 per worker keep each one's
copy busy even when the kernel spreads the connections unevenly); then 4x that rate arrives evenly
spaced for ``--seconds``, whatever the answers (open loop), once over kept-alive
connections (a pool that reuses the connection released last, as Go's and urllib3's do) and
once with a new connection per request. Goodput counts the 200s answered from the first
second to the end of the offered load.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _open_loop import Answer, closed_loop, open_loop
from run import ROOT, _machine, start_servinglib, write_docs

SLOW = """  - name: slow
    class: models/misbehaving/model.py:Misbehaving
    repository: models/misbehaving
    default_version: "1"
    instances: 1
    deadline_ms: 1000
"""
BODY = {"model_id": "slow", "features": {"sleep_s": 0.05}}


@dataclass(frozen=True)
class Overload:
    """One 4x run and the capacity it is measured against."""

    worker: str
    keepalive: bool
    capacity: float
    seconds: float
    answers: list[Answer]

    def row(self) -> str:
        statuses = Counter(a.status for a in self.answers)
        start = min(a.sent for a in self.answers)
        ok = sorted(
            a.seconds
            for a in self.answers
            if a.status == 200 and start + 1 <= a.done <= start + self.seconds
        )
        goodput = len(ok) / (self.seconds - 1)
        shed = sorted(a.seconds for a in self.answers if a.status == 503)
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items()))
        connections = "kept alive" if self.keepalive else "one per request"
        return (
            f"| {self.worker} | {connections} | {self.capacity:.1f} | {4 * self.capacity:.0f} | "
            f"{goodput:.1f} (**{goodput / self.capacity:.0%}**) | {_pct(ok, 0.5)} | "
            f"{_pct(ok, 0.99)} | {_pct(shed, 0.5)} | {codes} |"
        )


def _pct(values: list[float], q: float) -> str:
    if not values:
        return "-"
    return f"{values[min(len(values) - 1, int(q * len(values)))] * 1000:.0f}"


def measure(seconds: float, worker: str, workdir: Path) -> list[Overload]:
    """Capacity, then 4x capacity over kept-alive connections and over new ones."""
    fixture = ROOT / "tests" / "fixtures" / "reliability"
    shutil.copytree(fixture / "models", workdir / "models", dirs_exist_ok=True)
    config = workdir / "servinglib.yaml"
    text = (fixture / "servinglib.yaml").read_text() + SLOW
    config.write_text(text.replace("server:\n", f"server:\n  worker: {worker}\n"))
    server = start_servinglib(config, workdir, workers=2)
    runs = []
    try:
        closed_loop(server.url, "/infer", BODY, concurrency=4, seconds=2)  # warm-up
        capacity = closed_loop(server.url, "/infer", BODY, concurrency=16, seconds=10)
        for keepalive in (True, False):
            answers = open_loop(
                server.url, "/infer", BODY, 4 * capacity, seconds, keepalive=keepalive
            )
            runs.append(Overload(worker, keepalive, capacity, seconds, answers))
    finally:
        server.stop()
    return runs


def render(runs: list[Overload], seconds: float, command: str) -> str:
    """The docs section, between markers."""
    return "\n".join(
        [
            "<!-- bench:overload-unbatched:start -->",
            "### Unbatched overload (two workers, one copy each, 50 ms per call, deadline 1 s)",
            "",
            f"Command: `{command}`  ",
            f"Machine: {_machine()}.",
            "",
            f"4x the measured capacity for {seconds:.0f} s, open loop. Goodput: 200s answered "
            "from the first second to the end of the load, per second; latencies in ms. The "
            "model's own limit is 40 calls/s (two copies of 50 ms).",
            "",
            "| worker | connections | capacity/s | offered/s | goodput/s | 200 p50 | 200 p99 | "
            "503 p50 | statuses |",
            "|---|---|---|---|---|---|---|---|---|",
            *(run.row() for run in runs),
            "",
            "Target: goodput >= 90 % of capacity, the rest 503 with `Retry-After: 1`, no "
            "client timeout (status 0).",
            "",
            "<!-- bench:overload-unbatched:end -->",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each 4x run")
    parser.add_argument("--worker", choices=["asyncio", "gthread"], action="append")
    parser.add_argument("--no-docs", action="store_true", help="print only")
    args = parser.parse_args()
    runs: list[Overload] = []
    for worker in args.worker or ["asyncio", "gthread"]:
        with tempfile.TemporaryDirectory() as tmp:
            runs += measure(args.seconds, worker, Path(tmp))
    block = render(
        runs, args.seconds, f"python benchmarks/reliability.py --seconds {args.seconds:g}"
    )
    print(block)
    if not args.no_docs:
        write_docs("overload-unbatched", block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
