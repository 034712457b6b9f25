"""What tracing costs the trivial model at concurrency 8; results go to docs/benchmarks.md.

    python benchmarks/tracing.py [--seconds 5] [--repeats 3]

Four servers of the trivial service (2 asyncio workers, metrics and JSON log on), side by
side, runs round-robin, the median run kept:

* OpenTelemetry not installed (a stub ``opentelemetry`` package that fails to import comes
  first on the path);
* the ``tracing`` extra installed, tracing off (no OTLP endpoint);
* tracing on, 1 % of requests sampled (``parentbased_traceidratio`` 0.01), exported over
  OTLP/HTTP to a receiver in this process (a real one decoding every request);
* tracing on, every request sampled (``always_on``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _load import LoadResult, Server, median_of, run_hey
from run import ROOT, TRIVIAL_BODY, _machine, start_servinglib, write_docs

sys.path.insert(0, str(ROOT))
from tests.otlp_receiver import OtlpReceiver

HEADER = "| Setup | Concurrency | Requests/s | p50 ms | p95 ms | p99 ms | Status codes |"
HEADER += "\n|---|---|---|---|---|---|---|"


def _without_opentelemetry(workdir: Path) -> Path:
    """A source path where ``import opentelemetry`` fails, as when it is not installed."""
    stub = workdir / "no-otel"
    (stub / "opentelemetry").mkdir(parents=True)
    (stub / "opentelemetry" / "__init__.py").write_text("raise ImportError('not installed')\n")
    return stub


def measure(seconds: float, repeats: int, workdir: Path) -> list[LoadResult]:
    receiver = OtlpReceiver()
    otlp = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint}
    stub = _without_opentelemetry(workdir)
    setups: dict[str, tuple[dict[str, str], Path | None]] = {
        "OpenTelemetry not installed": ({}, stub),
        "tracing extra installed, tracing off": ({}, None),
        "tracing on, 1 % sampled": (
            {
                **otlp,
                "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                "OTEL_TRACES_SAMPLER_ARG": "0.01",
            },
            None,
        ),
        "tracing on, 100 % sampled": ({**otlp, "OTEL_TRACES_SAMPLER": "always_on"}, None),
    }
    trivial = ROOT / "benchmarks/services/trivial/servinglib.yaml"
    started: dict[str, Server] = {}
    runs: dict[str, list[LoadResult]] = {label: [] for label in setups}
    try:
        for label, (env, first) in setups.items():
            # the stub goes before this checkout, which the benchmark serves either way
            source = None if first is None else Path(f"{first}:{ROOT}")
            started[label] = start_servinglib(trivial, workdir, source=source, env=env)
            run_hey(label, started[label].url + "/infer", TRIVIAL_BODY, 8, 2)  # warm-up
        labels = list(started)
        for repeat in range(repeats):
            turn = repeat % len(labels)
            for label in labels[turn:] + labels[:turn]:
                url = started[label].url + "/infer"
                runs[label].append(run_hey(label, url, TRIVIAL_BODY, 8, seconds))
    finally:
        for server in started.values():
            server.stop()
        receiver.close()
    return [median_of(runs[label]) for label in setups]


def render(results: list[LoadResult], command: str) -> str:
    absent, off, low, full = results
    lines = [
        "<!-- bench:tracing:start -->",
        "### Tracing overhead (sum of 16 floats, concurrency 8)",
        "",
        f"Command: `{command}`  ",
        f"Machine: {_machine()}.",
        "",
        HEADER,
        *[r.row() for r in results],
        "",
        "Requests/s against OpenTelemetry not installed: installed but off "
        f"**{100 * (off.rps / absent.rps - 1):+.1f} %** (target within 1 %); 1 % sampled "
        f"**{100 * (low.rps / absent.rps - 1):+.1f} %** (target within 3 %); every request "
        f"sampled **{100 * (full.rps / absent.rps - 1):+.1f} %** (reported). With tracing off "
        "the request path makes no OpenTelemetry call: the code is the same whether the "
        "extra is installed or not, so the first difference is the machine's noise. The four "
        "servers run at once and the runs go round-robin; each row is the median run. The "
        "OTLP receiver decoding the spans runs on the same 2 cores.",
        "",
        "<!-- bench:tracing:end -->",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        results = measure(args.seconds, args.repeats, Path(workdir))
    for result in results:
        print(result.row())
    command = "python benchmarks/tracing.py " + shlex.join(sys.argv[1:])
    write_docs("tracing", render(results, command.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
