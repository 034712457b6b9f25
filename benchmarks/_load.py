"""Drive a server with `hey` (Debian's HTTP load generator) and summarise its CSV output."""

from __future__ import annotations

import concurrent.futures
import csv
import io
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LoadResult", "Server", "free_port", "median_of", "pooled", "run_hey"]


@dataclass(frozen=True)
class LoadResult:
    """Throughput and latency percentiles of one load run."""

    label: str
    concurrency: int
    requests: int
    rps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    statuses: dict[int, int]
    p99_ok_ms: float = float("nan")
    max_ms: float = float("nan")
    latencies_ms: tuple[float, ...] = field(default=(), repr=False)
    seconds: float = 0.0

    def row(self) -> str:
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(self.statuses.items()))
        return (
            f"| {self.label} | {self.concurrency} | {self.rps:,.0f} | {self.p50_ms:.2f} | "
            f"{self.p95_ms:.2f} | {self.p99_ms:.2f} | {codes} |"
        )


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def run_hey(
    label: str,
    url: str,
    body: Any,
    concurrency: int,
    seconds: float,
    rate_per_worker: float | None = None,
    headers: dict[str, str] | None = None,
) -> LoadResult:
    """POST ``body`` to ``url`` from ``concurrency`` connections for ``seconds``.

    ``body`` is sent as JSON, or as it is when it is ``bytes`` (then ``headers`` should
    name its Content-Type).
    """
    hey = shutil.which("hey")
    if hey is None:
        raise SystemExit("the benchmark needs `hey`: apt-get install hey")
    headers = dict(headers or {})
    content_type = headers.pop("Content-Type", "application/json")
    command = [hey, "-z", f"{seconds}s", "-c", str(concurrency), "-m", "POST"]
    command += ["-T", content_type, "-o", "csv"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    if rate_per_worker:
        command += ["-q", str(rate_per_worker)]
    with tempfile.NamedTemporaryFile(suffix=".body") as body_file:
        if isinstance(body, bytes):
            body_file.write(body)
            body_file.flush()
            command += ["-D", body_file.name]
        else:
            command += ["-d", json.dumps(body)]
        run = subprocess.run([*command, url], capture_output=True, text=True, check=True)
    output = run.stdout
    latencies, accepted, statuses = [], [], {}
    for row in csv.DictReader(io.StringIO(output)):
        latency = float(row["response-time"]) * 1000
        code = int(row["status-code"])
        latencies.append(latency)
        if code == 200:
            accepted.append(latency)
        statuses[code] = statuses.get(code, 0) + 1
    latencies.sort()
    accepted.sort()
    return LoadResult(
        label,
        concurrency,
        len(latencies),
        len(latencies) / seconds,
        _percentile(latencies, 0.50),
        _percentile(latencies, 0.95),
        _percentile(latencies, 0.99),
        statuses,
        _percentile(accepted, 0.99),
        latencies[-1] if latencies else float("nan"),
        tuple(latencies),
        seconds,
    )


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A server process started for a benchmark, waited for, and stopped."""

    def __init__(
        self, command: list[str], port: int, ready_path: str, cwd: Path, env: dict[str, str]
    ) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._log = (cwd / f"server-{port}.log").open("wb")
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd, env=env
        )
        deadline = time.monotonic() + 120
        while True:
            if self.process.poll() is not None:
                raise SystemExit(f"{command[0]} exited early; see {self._log.name}")
            try:
                with urllib.request.urlopen(self.url + ready_path, timeout=2) as response:
                    if response.status < 500:
                        break
            except urllib.error.HTTPError as e:
                if e.code < 500:  # answering: a 404 on a probe path is fine
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{command} not ready after 120 s")
            time.sleep(0.2)

    def cpu_s(self) -> float:
        """CPU seconds used so far by the server and every process below it (Linux /proc)."""
        parents: dict[int, int] = {}
        used: dict[int, float] = {}
        tick = os.sysconf("SC_CLK_TCK")
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            parents[int(entry.name)] = int(fields[1])
            used[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
        tree, grew = {self.process.pid}, True
        while grew:
            below = {pid for pid, parent in parents.items() if parent in tree} - tree
            tree |= below
            grew = bool(below)
        return sum(used.get(pid, 0.0) for pid in tree)

    def settle(self, timeout_s: float = 15.0, window_s: float = 0.25) -> None:
        """Wait until the server stops using CPU after a run (at most ``timeout_s``).

        A server may still work after its last answer (its log writer writing a backlog of
        access-log lines): the next run, against another server, would pay for it.
        """
        deadline = time.monotonic() + timeout_s
        before = self.cpu_s()
        while time.monotonic() < deadline:
            time.sleep(window_s)
            now = self.cpu_s()
            if now - before < 0.02 * window_s:  # under 2 % of one core
                return
            before = now

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()


def run_hey_together(runs: list[tuple[str, str, Any, int, float]]) -> list[LoadResult]:
    """Several :func:`run_hey` runs ``(label, url, body, concurrency, seconds)`` at the same
    time, one ``hey`` each: setups loaded together share every moment of the machine's
    noise, which setups loaded in turn do not."""
    with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
        started = [pool.submit(run_hey, *run) for run in runs]
        return [future.result() for future in started]


def pooled(results: list[LoadResult]) -> LoadResult:
    """One result from every request of several runs of the same setup.

    Percentiles of the pooled latencies are far steadier than those of any single run (a
    p99 over 10,000 requests rests on 100 of them, not on 15).
    """
    latencies = sorted(x for r in results for x in r.latencies_ms)
    statuses: dict[int, int] = {}
    for r in results:
        for code, count in r.statuses.items():
            statuses[code] = statuses.get(code, 0) + count
    seconds = sum(r.seconds for r in results)
    return LoadResult(
        results[0].label,
        results[0].concurrency,
        len(latencies),
        len(latencies) / seconds if seconds else float("nan"),
        _percentile(latencies, 0.50),
        _percentile(latencies, 0.95),
        _percentile(latencies, 0.99),
        statuses,
        max_ms=latencies[-1] if latencies else float("nan"),
        latencies_ms=tuple(latencies),
        seconds=seconds,
    )


def median_of(results: list[LoadResult]) -> LoadResult:
    """The run with the median throughput of several repeats."""
    ordered = sorted(results, key=lambda r: r.rps)
    return ordered[len(ordered) // 2]


def mean(values: list[float]) -> float:
    return statistics.fmean(values)
