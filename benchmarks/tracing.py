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
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _load import LoadResult, Server, median_of, run_hey, run_hey_together
from _toggle import Toggle, ratio_summary, toggle_rounds, worker_pids
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
    together: dict[str, dict[str, float]]  # off and 1 % loaded at once with not installed


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
    toggle = Toggle(workdir, "tracing")
    low = {
        **otlp,
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.01",
        **toggle.env,
    }
    phases: list[dict[str, tuple[dict[str, str], Path | None]]] = [
        {ABSENT: ({}, stub), OFF: ({}, None), ONE: (low, toggle.site)},
        {FULL: ({**otlp, "OTEL_TRACES_SAMPLER": "always_on"}, None)},
    ]
    config, body, concurrency, threads = _scenario(model, workdir)
    started: dict[tuple[str, int], Server] = {}
    runs: dict[str, list[LoadResult]] = {}
    cpu: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    per_server: dict[int, list[float]] = {}  # requests/s of each not-installed server
    toggled: dict[str, float] = {}
    together: dict[str, dict[str, float]] = {}

    loader = _Loader(body, concurrency, seconds)

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
                    result, cpu_us = loader.one(started[label, instance], name)
                    runs.setdefault(name, []).append(result)
                    cpu.setdefault(name, []).append(cpu_us)
                    this_round.setdefault(name, []).append(result.rps)
                    if label == ABSENT and number == 0:
                        per_server.setdefault(instance, []).append(result.rps)
                for name, rps in this_round.items():
                    base = statistics.fmean(this_round[baseline])
                    ratios.setdefault(name, []).append(statistics.fmean(rps) / base)
            if number == 0:  # the 1 % servers switched off and on; setups loaded at once
                toggled, together = _beside(started, instances, toggle, loader, repeats)
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
        together,
    )


@dataclass(frozen=True)
class _Loader:
    """Loads a server with ``hey`` and reads its workers' CPU per request (us)."""

    body: Any
    concurrency: int
    seconds: float

    def one(self, server: Server, name: str) -> tuple[LoadResult, float]:
        """A run of ``server`` labelled ``name``, and its workers' CPU per request."""
        return self.at_once([(server, name)])[0]

    def at_once(self, servers: list[tuple[Server, str]]) -> list[tuple[LoadResult, float]]:
        """A run of each server at the same time (one ``hey`` each)."""
        workers = [worker_pids(server) for server, _ in servers]
        before = [sum(_cpu_ticks(p) for p in pids) for pids in workers]
        url, body, c, seconds = "/infer", self.body, self.concurrency, self.seconds
        runs = [(name, server.url + url, body, c, seconds) for server, name in servers]
        results = [run_hey(*runs[0])] if len(runs) == 1 else run_hey_together(runs)
        return [
            (result, (sum(_cpu_ticks(p) for p in pids) - was) / 100 * 1e6 / result.requests)
            for result, pids, was in zip(results, workers, before, strict=True)
        ]


def _beside(
    started: dict[tuple[str, int], Server],
    instances: int,
    toggle: Toggle,
    loader: _Loader,
    repeats: int,
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """The 1 % servers with tracing switched off and on in turns; then "off" and "1 %"
    each loaded at the same time as the not-installed servers."""
    ones = [started[ONE, instance] for instance in range(instances)]
    toggled = toggle_rounds(
        ones, toggle, lambda server, on: loader.one(server, ONE if on else OFF), repeats
    )
    absent = [started[ABSENT, instance] for instance in range(instances)]
    together = {
        label: _together(absent, [started[label, i] for i in range(instances)], label, loader)
        for label in (OFF, ONE)
    }
    return toggled, together


TOGETHER_ROUNDS = 2  # each not-installed server beside each server of the other setup, twice


def _together(
    absent: list[Server],
    others: list[Server],
    label: str,
    loader: _Loader,
) -> dict[str, float]:
    """Each not-installed server loaded at the same time as each server of ``label``
    (two ``hey`` at once, every pairing :data:`TOGETHER_ROUNDS` times): the median ratio of
    requests/s and of CPU per request, ``label`` over not installed, with quartiles."""
    rps: list[float] = []
    cpu: list[float] = []
    for _ in range(TOGETHER_ROUNDS):
        for base in absent:
            for other in others:
                (b, b_cpu), (o, o_cpu) = loader.at_once([(base, ABSENT), (other, label)])
                rps.append(o.rps / b.rps)
                cpu.append(o_cpu / b_cpu)
    return {**ratio_summary(rps), "cpu": statistics.median(cpu)}


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
        f"(**{100 * (toggle['cpu_on'] / toggle['cpu_off'] - 1):+.1f} %**).\n\n"
        "Loaded at the same time as a not-installed server (two `hey` at once, each server "
        "beside each of the other setup's): "
        + "; ".join(
            f"{name} **{100 * (t['ratio'] - 1):+.1f} %** requests/s (quartiles "
            f"{100 * (t['low'] - 1):+.1f} % and {100 * (t['high'] - 1):+.1f} %, "
            f"{t['pairs']:.0f} pairs), worker CPU per request {100 * (t['cpu'] - 1):+.1f} %"
            for name, t in (
                ("installed but off", measured.together[OFF]),
                ("1 % sampled", measured.together[ONE]),
            )
        )
        + ". Setups loaded at once share every moment of the machine's noise."
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
