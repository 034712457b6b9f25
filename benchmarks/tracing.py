"""What tracing costs the trivial model at concurrency 8 and MiniLM INT8 at concurrency 32
(when ``examples/sentence-embeddings`` is prepared); results go to docs/benchmarks.md.

    python benchmarks/tracing.py [--seconds 5] [--repeats 3] [--instances 1] [--skip-minilm]

For each model, four setups (2 asyncio workers, metrics on; the JSON access log on for the
trivial model, off for MiniLM as in benchmarks/minilm.py), side by side, runs round-robin,
the median run kept. ``--instances N`` serves each setup from N identical servers, their
runs pooled: two servers running the same code differ by a few percent between them (where
their workers and memory land), which a single server per setup reads as the setup's cost.
The setups:

* OpenTelemetry not installed (a stub ``opentelemetry`` package that fails to import comes
  first on the path);
* the ``tracing`` extra installed, tracing off (no OTLP endpoint);
* tracing on, 1 % of requests sampled (``parentbased_traceidratio`` 0.01), exported over
  OTLP/HTTP to a receiver in this process (a real one decoding every request);
* tracing on, every request sampled (``always_on``).

With tracing on, the sampled requests also leave their trace id as an exemplar on the
latency histogram (a file write per worker at most twice a second).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _load import LoadResult, Server, median_of, run_hey
from overheads import _cpu_ticks
from run import ROOT, TRIVIAL_BODY, _machine, start_servinglib, write_docs

sys.path.insert(0, str(ROOT))
from tests.otlp_receiver import OtlpReceiver

MINILM_TOKENIZER = ROOT / "examples/sentence-embeddings/models/minilm/2/tokenizer.json"

HEADER = "| Setup | Concurrency | Requests/s | p50 ms | p95 ms | p99 ms | Status codes | "
HEADER += "worker CPU us/request |\n|---|---|---|---|---|---|---|---|"


def _without_opentelemetry(workdir: Path) -> Path:
    """A source path where ``import opentelemetry`` fails, as when it is not installed."""
    stub = workdir / "no-otel"
    (stub / "opentelemetry").mkdir(parents=True)
    (stub / "opentelemetry" / "__init__.py").write_text("raise ImportError('not installed')\n")
    return stub


def span_cost_us() -> dict[str, float]:
    """Microseconds of tracing work per request in process, without the server around it:
    the server span and the spans of an unbatched request, kept in memory; then their
    OTLP encoding, as the exporter does it (not the HTTP post)."""
    import timeit

    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

    from servinglib.serve.tracing_setup import _hashed_once
    from servinglib.serving import tracing

    resource = _hashed_once(Resource.create({"service.name": "bench"}))  # as a worker's
    provider = TracerProvider(sampler=ParentBased(ALWAYS_ON), resource=resource)
    kept = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    headers: dict[str, str] = {}
    costs = {}
    for label, ratio in (("untraced request (1 % sampling, not drawn)", 0.0), ("traced", 1.0)):
        traced = tracing.Tracing(provider.get_tracer("bench"), ratio)

        def request(t: tracing.Tracing = traced) -> None:
            span, context = t.start_request(headers.get, "POST /infer", "infer")
            if context is None:
                return
            started = time.time_ns()
            for name in ("parse", "admit"):
                t.record(name, context, started)
            t.record_batch([context], [0.0001], started, 1)
            t.record("encode", context, started)
            t.finish_request(span, 200, "summer16", "1", t.trace_id(context))

        best = float("inf")
        for _ in range(10):
            kept.clear()  # kept spans would make every garbage collection slower
            used = timeit.Timer(request, timer=time.thread_time).timeit(200)  # CPU, not wall
            best = min(best, used / 200 * 1e6)
        costs[label] = best
    spans = kept.get_finished_spans()[-600:]  # those of 100 requests
    encoding = timeit.Timer(lambda: encode_spans(spans).SerializeToString(), timer=time.thread_time)
    encode = min(encoding.repeat(repeat=5, number=5))
    costs["OTLP encoding of a traced request's spans"] = encode / 5 / 100 * 1e6
    return costs


def _workers(server: Server) -> list[str]:
    found = subprocess.run(
        ["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True, check=True
    )
    return found.stdout.split()


def measure(
    model: str, seconds: float, repeats: int, workdir: Path, instances: int = 1
) -> tuple[list[LoadResult], list[float]]:
    """The median run of each setup serving ``model`` (``trivial`` at concurrency 8,
    ``minilm`` at 32), and its workers' median CPU microseconds per request, over
    ``instances`` identical servers per setup."""
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
    config, body, concurrency, threads = _scenario(model, workdir)
    started: dict[tuple[str, int], Server] = {}
    runs: dict[str, list[LoadResult]] = {label: [] for label in setups}
    cpu: dict[str, list[float]] = {label: [] for label in setups}
    try:
        for instance in range(instances):
            for label, (env, first) in setups.items():
                # the stub goes before this checkout, which the benchmark serves either way
                source = None if first is None else Path(f"{first}:{ROOT}")
                server = start_servinglib(config, workdir, threads=threads, source=source, env=env)
                started[label, instance] = server
                run_hey(label, server.url + "/infer", body, concurrency, 2)  # warm-up
        keys = list(started)
        for repeat in range(repeats):
            turn = repeat % len(keys)
            for label, instance in keys[turn:] + keys[:turn]:
                server = started[label, instance]
                workers = _workers(server)
                before = sum(_cpu_ticks(p) for p in workers)
                result = run_hey(label, server.url + "/infer", body, concurrency, seconds)
                ticks = sum(_cpu_ticks(p) for p in workers) - before
                runs[label].append(result)
                cpu[label].append(ticks / 100 * 1e6 / result.requests)
    finally:
        for server in started.values():
            server.stop()
        receiver.close()
    return (
        [median_of(runs[label]) for label in setups],
        [statistics.median(cpu[label]) for label in setups],
    )


def _scenario(model: str, workdir: Path) -> tuple[Path, Any, int, int]:
    """The config, request body, concurrency and threads per worker of ``model``."""
    if model == "trivial":
        return ROOT / "benchmarks/services/trivial/servinglib.yaml", TRIVIAL_BODY, 8, 8
    from minilm import servinglib_service, tokens

    features = tokens()
    config = servinglib_service(workdir, features)
    return config, {"model_id": "minilm", "features": features}, 32, 32


def _ratios(results: list[LoadResult], cpu_us: list[float]) -> str:
    """Requests/s and worker CPU per request of each setup against the first."""
    absent, off, low, full = results
    c_absent, c_off, c_low, c_full = cpu_us
    return (
        "Against OpenTelemetry not installed, requests/s and worker CPU per request: installed "
        f"but off **{100 * (off.rps / absent.rps - 1):+.1f} %** / "
        f"**{100 * (c_off / c_absent - 1):+.1f} %** (target within 1 %); 1 % sampled "
        f"**{100 * (low.rps / absent.rps - 1):+.1f} %** / **{100 * (c_low / c_absent - 1):+.1f} %**"
        " (target within 3 %); every request sampled "
        f"**{100 * (full.rps / absent.rps - 1):+.1f} %** / "
        f"**{100 * (c_full / c_absent - 1):+.1f} %** (reported). The two setups running the "
        f"same request path differ by {100 * abs(off.rps / absent.rps - 1):.1f} % in "
        "requests/s on this run: smaller differences are noise here."
    )


def render(
    measured: dict[str, tuple[list[LoadResult], list[float]]],
    spans_us: dict[str, float],
    command: str,
    load: str,
) -> str:
    results, cpu_us = measured["trivial"]
    c_absent = cpu_us[0]
    untraced, spans, encoding = spans_us.values()
    traced = spans + encoding
    lines = [
        "<!-- bench:tracing:start -->",
        "### Tracing overhead (sum of 16 floats at concurrency 8; MiniLM INT8 at 32)",
        "",
        f"Command: `{command}`  ",
        f"Machine: {_machine()}; load average before the run {load}.",
        "",
        "Sum of 16 floats, concurrency 8:",
        "",
        HEADER,
        *[f"{r.row()[:-1]}| {us:.0f} |" for r, us in zip(results, cpu_us, strict=True)],
        "",
        _ratios(results, cpu_us),
        "",
    ]
    if "minilm" in measured:
        m_results, m_cpu = measured["minilm"]
        lines += [
            "MiniLM INT8 (`runtime: onnx`, dynamic batching up to 32), concurrency 32:",
            "",
            HEADER,
            *[f"{r.row()[:-1]}| {us:.0f} |" for r, us in zip(m_results, m_cpu, strict=True)],
            "",
            _ratios(m_results, m_cpu),
            "",
        ]
    lines += [
        "With tracing off "
        "the request path makes no OpenTelemetry call: the code is the same whether the "
        "extra is installed or not, so the first difference is the machine's noise. For each "
        "model the servers run at once and the runs go round-robin; each row is the "
        "median run over every server of its setup. The "
        "OTLP receiver decoding the spans runs on the same 2 cores.",
        "",
        "Tracing work per request in process (`span_cost_us`): "
        + "; ".join(f"{label} **{us:.1f} us**" for label, us in spans_us.items())
        + "; tracing off: one module attribute read per step. Against the worker CPU of a "
        f"request without OpenTelemetry ({c_absent:.0f} us), 1 % sampling adds "
        f"**{100 * (untraced + 0.01 * traced) / c_absent:.1f} %** (the untraced requests' "
        "cost plus 1 % of a traced one's), every request sampled "
        f"**{100 * traced / c_absent:.0f} %** (spans and their encoding; the HTTP post, the "
        "exemplar and the log's trace id not counted). The two servers running the same "
        "code (not installed, installed but off) differ by more than either target on this "
        "shared machine: the server figures above bound the cost only roughly, and the "
        "in-process figures are the ones that settle the targets. A sampled request also "
        "leaves its exemplar on the latency histogram (a dictionary update; a file write per "
        "worker at most every 0.5 s); with tracing off nothing is recorded.",
        "",
        "<!-- bench:tracing:end -->",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--instances", type=int, default=1, help="servers per setup")
    parser.add_argument("--skip-minilm", action="store_true", help="the trivial model only")
    args = parser.parse_args()
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    models = ["trivial"]
    if not args.skip_minilm and MINILM_TOKENIZER.is_file():
        models.append("minilm")
    elif not args.skip_minilm:
        print("MiniLM is not prepared (python examples/sentence-embeddings/prepare.py): skipped")
    measured = {}
    for model in models:
        with tempfile.TemporaryDirectory() as workdir:
            measured[model] = measure(
                model, args.seconds, args.repeats, Path(workdir), args.instances
            )
        for result, us in zip(*measured[model], strict=True):
            print(model, result.row(), f"{us:.0f} us CPU/request")
    spans_us = span_cost_us()
    print(spans_us)
    command = "python benchmarks/tracing.py " + shlex.join(sys.argv[1:])
    write_docs("tracing", render(measured, spans_us, command.strip(), load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
