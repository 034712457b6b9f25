"""One ``servinglib bench`` run: inputs, levels, rounds, the server's view, the document."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from servinglib.bench._inputs import (
    declared_datatypes,
    inputs_from_cases,
    inputs_from_file,
    inputs_from_schema,
)
from servinglib.bench._load import Samples, closed_loop, open_loop
from servinglib.bench._payloads import Prepared, build_requests
from servinglib.bench._server_metrics import server_view, snapshot
from servinglib.bench._stats import combine_rounds, summarise
from servinglib.errors import ConfigError

__all__ = ["FORMAT", "BenchOptions", "run_bench"]

FORMAT = 1  # "servinglib_bench" in the JSON document


@dataclass
class BenchOptions:
    """What to load and how (the ``servinglib bench`` flags)."""

    url: str
    model: str
    version: str | None = None
    protocol: str = "v2"
    grpc_address: str | None = None
    concurrency: Sequence[int] = (1,)
    rates: Sequence[float] = ()
    seconds: float = 5.0
    count: int = 0
    warmup_s: float = 1.0
    rounds: int = 1
    inputs: str = "cases"
    config: str | None = None
    max_in_flight: int = 64
    label: str = ""
    settings: dict[str, Any] = field(default_factory=dict)


Printer = Callable[[str], None]


def _inputs(options: BenchOptions) -> list[dict[str, Any]]:
    if options.inputs not in ("cases", "schema"):
        return inputs_from_file(Path(options.inputs))
    if options.config is None:
        raise ConfigError(
            f"--inputs {options.inputs} reads the model's config; pass --config, "
            "or --inputs FILE with a JSON list of inputs"
        )
    if options.inputs == "cases":
        return inputs_from_cases(options.config, options.model, options.version)
    return inputs_from_schema(options.config, options.model)


def prepare(options: BenchOptions) -> list[Prepared]:
    """The requests of the run, one per input."""
    datatypes = declared_datatypes(options.url, options.model, options.version)
    return build_requests(
        options.model, options.version, _inputs(options), options.protocol, datatypes
    )


def _progress(prefix: str, print_line: Printer) -> Callable[[Samples], None]:
    started = time.perf_counter()

    def show(samples: Samples) -> None:
        with samples.lock:
            done, failed = len(samples.statuses), sum(1 for s in samples.statuses if s != 200)
        elapsed = time.perf_counter() - started
        print_line(f"\r{prefix}: {done} requests, {done / elapsed:,.0f}/s, {failed} errors ")

    return show


def _window(
    options: BenchOptions, requests: list[Prepared], mode: str, level: float, show: Any
) -> Samples:
    grpc = options.protocol == "grpc"
    target = options.grpc_address if grpc else options.url
    if grpc and not target:
        raise ConfigError("--protocol grpc needs --grpc ADDRESS (or a server with grpc_port)")
    assert target is not None
    if mode == "concurrency":
        return closed_loop(
            target,
            requests,
            int(level),
            seconds=options.seconds,
            count=options.count,
            warmup_s=options.warmup_s,
            grpc=grpc,
            progress=show,
        )
    return open_loop(
        target,
        requests,
        level,
        seconds=options.seconds,
        max_in_flight=options.max_in_flight,
        grpc=grpc,
        progress=show,
    )


def run_bench(options: BenchOptions, print_line: Printer | None = None) -> dict[str, Any]:
    """Load the server at each level for ``rounds`` windows; return the run's document."""
    out = print_line or (lambda text: print(text, end="", file=sys.stderr, flush=True))
    requests = prepare(options)
    mode = "rate" if options.rates else "concurrency"
    levels: Sequence[float] = options.rates or options.concurrency
    results = []
    for level in levels:
        rounds = []
        before = snapshot(options.url, options.model)
        for index in range(options.rounds):
            name = f"{mode} {level:g} round {index + 1}/{options.rounds}"
            samples = _window(options, requests, mode, level, _progress(name, out))
            rounds.append(summarise(samples))
            r = rounds[-1]
            out(
                f"\r{name}: {r['throughput_rps']:,.1f}/s, p50 {r['p50_ms']:.2f} ms, "
                f"p95 {r['p95_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, errors {r['errors']}\n"
            )
        server = server_view(before, snapshot(options.url, options.model))
        results.append(
            {"level": level, **combine_rounds(rounds), "server": server, "rounds": rounds}
        )
    return {
        "servinglib_bench": FORMAT,
        "label": options.label or f"{options.model} {options.protocol}",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mode": mode,
        "options": {k: v for k, v in asdict(options).items() if k != "settings"},
        "settings": options.settings,
        "levels": results,
    }
