"""What tracing costs the trivial model at concurrency 8 and MiniLM INT8 at concurrency 32
(when ``examples/sentence-embeddings`` is prepared); results go to docs/benchmarks.md.

    python benchmarks/tracing.py [--seconds 5] [--repeats 3] [--instances 1] [--skip-minilm]

For each model, four setups (2 asyncio workers, metrics on; the JSON access log on for the
trivial model, off for MiniLM as in benchmarks/minilm.py) in two phases, each side by side
with its runs round-robin: not installed, off and 1 % first, then the not-installed servers
beside the 100 % ones (see :func:`measure`). Requests/s ratios are the median of each
round's ratio to the not-installed servers of the same phase. ``--instances N`` serves each
setup from N identical servers, their runs pooled: two servers running the same code differ
by a few percent between them (where their workers and memory land), which a single server
per setup reads as the setup's cost. Between the phases, each 1 % server is switched
between tracing on and off in turns (a signal to its workers, through a ``sitecustomize``
only this benchmark puts on their path) and measured both ways: the same processes, so the
request path's cost without the differences between servers.
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
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _load import LoadResult, Server, median_of, run_hey
from overheads import _cpu_ticks
from run import ROOT, TRIVIAL_BODY, _machine, start_servinglib, write_docs

sys.path.insert(0, str(ROOT))
from tests.otlp_receiver import OtlpReceiver

MINILM_TOKENIZER = ROOT / "examples/sentence-embeddings/models/minilm/2/tokenizer.json"

ONE = "tracing on, 1 % sampled"
OFF = "tracing extra installed, tracing off"

HEADER = "| Setup | Concurrency | Requests/s | p50 ms | p95 ms | p99 ms | Status codes | "
HEADER += "worker CPU us/request |\n|---|---|---|---|---|---|---|---|"


def _without_opentelemetry(workdir: Path) -> Path:
    """A source path where ``import opentelemetry`` fails, as when it is not installed."""
    stub = workdir / "no-otel"
    (stub / "opentelemetry").mkdir(parents=True)
    (stub / "opentelemetry" / "__init__.py").write_text("raise ImportError('not installed')\n")
    return stub


TOGGLE_SITE = """\
import os
import signal

_DIRECTORY = os.environ.get("BENCH_TRACING_TOGGLE_DIR")


def _toggle(signum, frame):
    from servinglib.serving import tracing

    global _SAVED
    if tracing.ACTIVE is not None:
        _SAVED, tracing.ACTIVE = tracing.ACTIVE, None
    elif _SAVED is not None:
        tracing.ACTIVE = _SAVED
    state = "on" if tracing.ACTIVE is not None else "off"
    with open(os.path.join(_DIRECTORY, str(os.getpid())), "w") as f:
        f.write(state)


_SAVED = None
if _DIRECTORY:
    os.register_at_fork(after_in_child=lambda: signal.signal(signal.SIGRTMIN + 1, _toggle))
"""


def _toggle_harness(workdir: Path) -> tuple[Path, Path]:
    """A ``sitecustomize`` that lets this benchmark switch a worker's tracing off and on
    again (a signal swaps ``servinglib.serving.tracing.ACTIVE`` with None), and the
    directory where each worker says which it is in. Benchmark scaffolding only: the
    server has no such switch."""
    site, states = workdir / "toggle-site", workdir / "toggle-states"
    site.mkdir()
    states.mkdir()
    (site / "sitecustomize.py").write_text(TOGGLE_SITE)
    return site, states


def _switch(server: Server, states: Path, on: bool) -> None:
    """Turn the tracing of every worker of ``server`` on or off; waits until each says so."""
    want = "on" if on else "off"
    workers = _workers(server)

    def state(pid: str) -> str:
        path = states / pid
        return path.read_text() if path.exists() else "on"  # tracing starts on

    for pid in workers:
        if state(pid) != want:
            os.kill(int(pid), signal.SIGRTMIN + 1)
    deadline = time.monotonic() + 10
    while any(state(pid) != want for pid in workers):
        if time.monotonic() > deadline:
            raise SystemExit(f"workers {workers} did not turn tracing {want} within 10 s")
        time.sleep(0.02)


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


ABSENT = "OpenTelemetry not installed"
ABSENT_FULL = "OpenTelemetry not installed, beside the 100 % server"
FULL = "tracing on, 100 % sampled"


@dataclass
class Measured:
    """Each setup's median run, worker CPU per request, per-round requests/s ratios, the
    spread between servers of the same setup, and the same-server toggle of 1 %."""

    runs: dict[str, LoadResult]
    cpu_us: dict[str, float]
    ratios: dict[str, float]  # median over rounds of (setup / its baseline) requests/s
    spread: float  # the fastest not-installed server's requests/s over the slowest's, minus 1
    toggled: dict[str, float]  # on the 1 % servers: median ratio on/off, CPU/request each


def measure(
    model: str, seconds: float, repeats: int, workdir: Path, instances: int = 1
) -> Measured:
    """Every setup serving ``model`` (``trivial`` at concurrency 8, ``minilm`` at 32), with
    ``instances`` identical servers per setup, in two phases.

    Phase one runs "not installed", "off" and "1 %" side by side, round-robin; then the
    "1 %" servers alone, each switched between tracing on (1 %) and off in turns, so that
    the same processes are measured both ways. Phase two stops the "off" and "1 %" servers
    and runs the "not installed" ones beside the 100 % servers: a fully sampled server
    leaves work running between its turns (its export backlog, the receiver decoding it on
    the same cores), which would land in the other setups' runs and be read as their cost.
    """
    receiver = OtlpReceiver()
    otlp = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint}
    stub = _without_opentelemetry(workdir)
    site, states = _toggle_harness(workdir)
    low = {
        **otlp,
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.01",
        "BENCH_TRACING_TOGGLE_DIR": str(states),
    }
    phases: list[dict[str, tuple[dict[str, str], Path | None]]] = [
        {ABSENT: ({}, stub), OFF: ({}, None), ONE: (low, site)},
        {FULL: ({**otlp, "OTEL_TRACES_SAMPLER": "always_on"}, None)},
    ]
    config, body, concurrency, threads = _scenario(model, workdir)
    started: dict[tuple[str, int], Server] = {}
    runs: dict[str, list[LoadResult]] = {}
    cpu: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    per_server: dict[int, list[float]] = {}  # requests/s of each not-installed server
    toggled: dict[str, float] = {}

    def load(server: Server, name: str) -> tuple[LoadResult, float]:
        workers = _workers(server)
        before = sum(_cpu_ticks(p) for p in workers)
        result = run_hey(name, server.url + "/infer", body, concurrency, seconds)
        ticks = sum(_cpu_ticks(p) for p in workers) - before
        return result, ticks / 100 * 1e6 / result.requests

    try:
        for number, setups in enumerate(phases):
            for key in [key for key in started if key[0] != ABSENT]:
                started.pop(key).stop()
            for instance in range(instances):
                for label, (env, first) in setups.items():
                    # the stub goes before this checkout, which the benchmark serves either way
                    source = None if first is None else Path(f"{first}:{ROOT}")
                    server = start_servinglib(
                        config, workdir, threads=threads, source=source, env=env
                    )
                    started[label, instance] = server
                    run_hey(label, server.url + "/infer", body, concurrency, 2)  # warm-up
            keys = list(started)
            baseline = ABSENT if number == 0 else ABSENT_FULL
            for repeat in range(repeats):
                turn = repeat % len(keys)
                this_round: dict[str, list[float]] = {}
                for label, instance in keys[turn:] + keys[:turn]:
                    name = baseline if label == ABSENT else label
                    result, cpu_us = load(started[label, instance], name)
                    runs.setdefault(name, []).append(result)
                    cpu.setdefault(name, []).append(cpu_us)
                    this_round.setdefault(name, []).append(result.rps)
                    if label == ABSENT and number == 0:
                        per_server.setdefault(instance, []).append(result.rps)
                for name, rps in this_round.items():
                    base = statistics.fmean(this_round[baseline])
                    ratios.setdefault(name, []).append(statistics.fmean(rps) / base)
            if number == 0:  # the same 1 % servers, tracing switched off and on in turns
                ones = [started[ONE, instance] for instance in range(instances)]
                toggled = _toggle_rounds(ones, states, load, repeats)
    finally:
        for server in started.values():
            server.stop()
        receiver.close()
    means = [statistics.fmean(rps) for rps in per_server.values()]
    return Measured(
        {name: median_of(found) for name, found in runs.items()},
        {name: statistics.median(found) for name, found in cpu.items()},
        {name: statistics.median(found) for name, found in ratios.items()},
        max(means) / min(means) - 1,
        toggled,
    )


def _toggle_rounds(
    servers: list[Server],
    states: Path,
    load: Callable[[Server, str], tuple[LoadResult, float]],
    repeats: int,
) -> dict[str, float]:
    """Each server measured with its tracing on and off in turns, ``repeats`` pairs each:
    the median ratio on/off of requests/s, its quartiles, and the median CPU per request."""
    cpu: dict[bool, list[float]] = {True: [], False: []}
    ratios: list[float] = []
    for repeat in range(repeats):
        for number, server in enumerate(servers):
            found: dict[bool, float] = {}
            for on in (True, False) if (repeat + number) % 2 == 0 else (False, True):
                _switch(server, states, on)
                result, cpu_us = load(server, ONE if on else OFF)
                cpu[on].append(cpu_us)
                found[on] = result.rps
            ratios.append(found[True] / found[False])
    for server in servers:
        _switch(server, states, True)
    ordered = sorted(ratios)
    return {
        "ratio": statistics.median(ratios),
        "low": ordered[len(ordered) // 4],
        "high": ordered[(3 * len(ordered)) // 4],
        "cpu_on": statistics.median(cpu[True]),
        "cpu_off": statistics.median(cpu[False]),
        "pairs": len(ratios),
    }


def _scenario(model: str, workdir: Path) -> tuple[Path, Any, int, int]:
    """The config, request body, concurrency and threads per worker of ``model``."""
    if model == "trivial":
        return ROOT / "benchmarks/services/trivial/servinglib.yaml", TRIVIAL_BODY, 8, 8
    from minilm import servinglib_service, tokens

    features = tokens()
    config = servinglib_service(workdir, features)
    return config, {"model_id": "minilm", "features": features}, 32, 32


ROWS = (ABSENT, OFF, ONE, ABSENT_FULL, FULL)


def _ratios(measured: Measured) -> str:
    """Requests/s (median of the rounds' ratios) and worker CPU per request of each setup
    against OpenTelemetry not installed, in the same phase."""
    cpu, ratios = measured.cpu_us, measured.ratios

    def against(label: str, base: str) -> str:
        return (
            f"**{100 * (ratios[label] - 1):+.1f} %** / "
            f"**{100 * (cpu[label] / cpu[base] - 1):+.1f} %**"
        )

    toggle = measured.toggled
    spread = measured.spread
    return (
        "Against OpenTelemetry not installed, requests/s (the median of the rounds' ratios) "
        f"and worker CPU per request: installed but off {against(OFF, ABSENT)} (target "
        f"within 1 %); 1 % sampled {against(ONE, ABSENT)} (target within 3 %); every request "
        f"sampled {against(FULL, ABSENT_FULL)} (reported; against the servers beside it). "
        "The two setups running the same request path (not installed, installed but off) "
        f"differ by {100 * abs(ratios[OFF] - 1):.1f} % in requests/s on this run, and the "
        f"not-installed servers among themselves by up to {100 * spread:.1f} % (the fastest "
        "one's mean over the slowest's): between separate servers, smaller differences are "
        "noise here.\n\n"
        "The same 1 % servers with their tracing switched off and on in turns (the same "
        f"processes, {toggle['pairs']:.0f} pairs of runs): 1 % sampled against off "
        f"**{100 * (toggle['ratio'] - 1):+.1f} %** requests/s (median of the pairs' ratios; "
        f"quartiles {100 * (toggle['low'] - 1):+.1f} % and {100 * (toggle['high'] - 1):+.1f} %), "
        f"worker CPU per request {toggle['cpu_on']:.0f} against {toggle['cpu_off']:.0f} us "
        f"(**{100 * (toggle['cpu_on'] / toggle['cpu_off'] - 1):+.1f} %**)."
    )


def _table(measured: Measured) -> list[str]:
    return [
        HEADER,
        *[f"{measured.runs[label].row()[:-1]}| {measured.cpu_us[label]:.0f} |" for label in ROWS],
    ]


def render(
    measured: dict[str, Measured],
    spans_us: dict[str, float],
    command: str,
    load: str,
) -> str:
    trivial = measured["trivial"]
    c_absent = trivial.cpu_us[ABSENT]
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
        *_table(trivial),
        "",
        _ratios(trivial),
        "",
    ]
    if "minilm" in measured:
        lines += [
            "MiniLM INT8 (`runtime: onnx`, dynamic batching up to 32), concurrency 32:",
            "",
            *_table(measured["minilm"]),
            "",
            _ratios(measured["minilm"]),
            "",
        ]
    lines += [
        "With tracing off "
        "the request path makes no OpenTelemetry call: the code is the same whether the "
        "extra is installed or not, so the first difference is the machine's noise. For each "
        "model the servers run in two phases, each side by side with its runs round-robin: "
        "not installed, off and 1 % first; then the not-installed servers beside the 100 % "
        "ones (the others stopped), because a fully sampled server leaves work running "
        "between its turns (its export backlog, the receiver decoding it) that would land in "
        "the other setups' runs. Each row is the median run over every server of its setup. "
        "The OTLP receiver decoding the spans runs on the same 2 cores.",
        "",
        "Tracing work per request in process (`span_cost_us`): "
        + "; ".join(f"{label} **{us:.1f} us**" for label, us in spans_us.items())
        + "; tracing off: one module attribute read per step. Against the worker CPU of a "
        f"request without OpenTelemetry ({c_absent:.0f} us), 1 % sampling adds "
        f"**{100 * (untraced + 0.01 * traced) / c_absent:.1f} %** (the untraced requests' "
        "cost plus 1 % of a traced one's), every request sampled "
        f"**{100 * traced / c_absent:.0f} %** (spans and their encoding; the HTTP post, the "
        "exemplar and the log's trace id not counted). A sampled request also "
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
        found = measured[model]
        for label in ROWS:
            print(model, found.runs[label].row(), f"{found.cpu_us[label]:.0f} us CPU/request")
        print(model, "requests/s against not installed:", found.ratios)
    spans_us = span_cost_us()
    print(spans_us)
    command = "python benchmarks/tracing.py " + shlex.join(sys.argv[1:])
    write_docs("tracing", render(measured, spans_us, command.strip(), load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
