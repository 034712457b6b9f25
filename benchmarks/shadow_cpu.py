"""A CPU-bound shadow at 100 % sampling: primary latency with and without it, side by side.

    python benchmarks/shadow_cpu.py --seconds 20 --repeats 3   # writes its docs section

Four services run at once, each on two asyncio workers, each the tests' misbehaving model
(version 1: 2 ms of sleep per call): without a shadow; with version 2 (50 ms of pure-Python
CPU per call, holding the interpreter lock) shadowing every request in the worker
(``isolation: thread``); the same under a CPU budget of 2 % of a core
(``max_cpu_share: 0.02``); and the same shadow in each worker's shadow process
(``isolation: process``). The same load (`hey`, 4 connections, 5 requests/s each) runs
against each in turn, ``--repeats`` times, and the percentiles are over every request of all
runs. The shadow copies that ran, were dropped or were shed are read from /metrics.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _load import LoadResult, pooled, run_hey
from run import HEADER, ROOT, _machine, start_servinglib, write_docs

BODY = {"model_id": "m", "features": {}}
CONNECTIONS, RATE_PER_CONNECTION = 4, 5
SETUPS = {  # label: shadow_executor settings ("": no shadow)
    "no shadow": "",
    "shadow 100 %, 50 ms CPU, in the worker (isolation: thread)": "isolation: thread",
    "shadow 100 %, 50 ms CPU, in the worker, max_cpu_share: 0.02": (
        "isolation: thread, max_cpu_share: 0.02"
    ),
    "shadow 100 %, 50 ms CPU, in a shadow process (isolation: process)": "isolation: process",
}


def _service(workdir: Path, executor: str) -> Path:
    service = workdir / f"service-{len(list(workdir.glob('service-*')))}"
    shutil.copytree(ROOT / "tests/fixtures/reliability/models", service / "models")
    versions = service / "models" / "misbehaving"
    shutil.copytree(versions / "1", versions / "2")
    (versions / "2" / "behaviour.json").write_text(json.dumps({"burn_s": 0.05}))
    shadow = "    shadow:\n      - {version: '2', sample_rate: 1.0}\n" if executor else ""
    settings = f"shadow_executor: {{{executor}}}\n" if executor else ""
    (service / "servinglib.yaml").write_text(
        f"service: bench-shadow-cpu\n{settings}models:\n  - name: m\n"
        "    class: models/misbehaving/model.py:Misbehaving\n"
        f"    repository: models/misbehaving\n    default_version: '1'\n{shadow}"
    )
    return service / "servinglib.yaml"


def _shadow_counts(url: str) -> dict[str, float]:
    """Shadow copies by outcome (and ``dropped``), summed over the workers."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "servinglib_shadow_requests_total":
                outcome = sample.labels["outcome"]
                counts[outcome] = counts.get(outcome, 0.0) + sample.value
            elif sample.name == "servinglib_shadow_dropped_total":
                counts["dropped"] = counts.get("dropped", 0.0) + sample.value
            elif sample.name == "servinglib_shadow_shed_total":
                counts["shed"] = counts.get("shed", 0.0) + sample.value
    return counts


def measure(
    seconds: float, repeats: int, workdir: Path
) -> tuple[list[LoadResult], list[dict[str, float]]]:
    """Pooled primary latencies of every setup, and the shadow copies each one ran."""
    servers = {
        label: start_servinglib(_service(workdir, s), workdir) for label, s in SETUPS.items()
    }
    runs: dict[str, list[LoadResult]] = {label: [] for label in SETUPS}
    try:
        for label, server in servers.items():  # warm-up (and the shadow processes' start)
            run_hey(label, f"{server.url}/infer", BODY, CONNECTIONS, 3, RATE_PER_CONNECTION)
        before = {label: _shadow_counts(server.url) for label, server in servers.items()}
        for _ in range(repeats):
            for label, server in servers.items():
                runs[label].append(
                    run_hey(
                        label,
                        f"{server.url}/infer",
                        BODY,
                        CONNECTIONS,
                        seconds,
                        RATE_PER_CONNECTION,
                    )
                )
        counts = []
        for label, server in servers.items():
            after = _shadow_counts(server.url)
            counts.append({k: v - before[label].get(k, 0.0) for k, v in after.items()})
    finally:
        for server in servers.values():
            server.stop()
    return [pooled(runs[label]) for label in SETUPS], counts


def render(results: list[LoadResult], counts: list[dict[str, float]], command: str) -> str:
    """The docs section, between markers."""
    plain, thread, budget, process = results

    def ran(count: dict[str, float]) -> str:
        parts = [f"{k} {v:,.0f}" for k, v in sorted(count.items()) if v]
        return ", ".join(parts) or "none"

    return "\n".join(
        [
            "<!-- bench:shadow-cpu:start -->",
            "### A CPU-bound shadow (50 ms of pure-Python CPU per copy, 100 % sampling, "
            f"{CONNECTIONS * RATE_PER_CONNECTION} requests/s)",
            "",
            f"Command: `{command}`  ",
            f"Machine: {_machine()}.",
            "",
            HEADER,
            *(r.row() for r in results),
            "",
            f"Primary p95 with the shadow in the worker: **{_change(thread, plain)}**; in the "
            f"worker with a 2 % CPU budget: **{_change(budget, plain)}**; in a shadow process: "
            f"**{_change(process, plain)}** (target <= +15 %). p50: "
            + " / ".join(f"{r.p50_ms:.2f}" for r in results)
            + " ms. The services run side by side; the load alternates between them run by "
            "run, and the percentiles are over every request of all runs. Shadow copies during "
            f"the measured runs: in the worker {ran(counts[1])}; with the budget "
            f"{ran(counts[2])}; in a shadow process {ran(counts[3])}.",
            "",
            "<!-- bench:shadow-cpu:end -->",
        ]
    )


def _change(result: LoadResult, baseline: LoadResult) -> str:
    return f"{result.p95_ms:.2f} ms, {100 * (result.p95_ms / baseline.p95_ms - 1):+.1f} %"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per setup, interleaved")
    parser.add_argument("--no-docs", action="store_true", help="print only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results, counts = measure(args.seconds, args.repeats, Path(tmp))
    command = f"python benchmarks/shadow_cpu.py --seconds {args.seconds:g} --repeats {args.repeats}"
    block = render(results, counts, command)
    print(block)
    if not args.no_docs:
        write_docs("shadow-cpu", block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
