"""``servinglib bench`` and ``servinglib bench sweep``: argparse and the printing around
:mod:`servinglib.bench`."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run"]

EXIT_OK, EXIT_FAILED = 0, 1


def _numbers(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers separated by commas") from e


def _load_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        help="servinglib.yaml: the self-test inputs, and the server "
        "to start when no --url is given",
    )
    parser.add_argument("--url", help="a running server (default: start one from --config)")
    parser.add_argument("--model", help="the model to load (required)")
    parser.add_argument("--version", dest="model_version", help="default: the traffic split")
    parser.add_argument(
        "--protocol",
        default="v2",
        choices=["infer", "v2", "v2-binary", "grpc"],
        help="POST /infer, Open Inference JSON or binary, or gRPC (default: %(default)s)",
    )
    parser.add_argument("--grpc", dest="grpc_address", help="HOST:PORT for --protocol grpc")
    parser.add_argument(
        "--concurrency",
        type=_numbers,
        default=[1.0],
        help="closed loop: requests in flight, e.g. 1,2,4,8 (default: 1)",
    )
    parser.add_argument(
        "--rate",
        type=_numbers,
        default=[],
        help="open loop instead: Poisson arrivals per second, e.g. 50,100",
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="per round (default: 5)")
    parser.add_argument(
        "--requests",
        type=int,
        default=0,
        help="closed loop: stop each round after N answers instead",
    )
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds (default: 1)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per level (default: 1)")
    parser.add_argument(
        "--inputs",
        default="cases",
        help="cases (self-tests), schema (made from input_schema) or a JSON file",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("bench-results"),
        help="directory for run.json/csv/png/html (default: %(default)s)",
    )
    parser.add_argument("--label", default="", help="names the run in reports and comparisons")


def add_parser(commands: Any) -> None:
    """Add ``bench`` (and its ``sweep``) to the ``servinglib`` subcommands."""
    bench = commands.add_parser(
        "bench",
        help="load a server, report latency and throughput, compare runs, sweep settings",
        description="Load a running server (--url) or one started from --config: a closed-loop\n"
        "concurrency sweep or open-loop Poisson rates, over /infer, Open Inference JSON,\n"
        "binary or gRPC. Writes run.json, run.csv, run.png and run.html into --out;\n"
        "--compare RUN.json prints both runs side by side with ratios.\n"
        "'servinglib bench sweep' serves a grid of settings and picks the best.",
        epilog="exit codes: 0 done, 1 some requests failed, 2 bad arguments or no server",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _load_flags(bench)
    bench.add_argument("--compare", type=Path, help="a run.json to compare this run with")
    sweep_commands = bench.add_subparsers(dest="bench_command")
    sweep = sweep_commands.add_parser(
        "sweep",
        help="serve a grid of settings; best throughput under a p95 budget",
        description="Start the server of --config once per point of the grid, load it, and\n"
        "print the point with the most throughput whose p95 is within --p95-budget-ms;\n"
        "its settings are written as a config snippet (--out/best.yaml).",
        epilog="exit codes: 0 a point fits the budget, 1 none does, 2 bad arguments",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _load_flags(sweep)
    sweep.add_argument(
        "--grid",
        action="append",
        default=[],
        help="NAME=V1,V2 with NAME one of max_batch_size, max_queue_delay_us, "
        "instances, workers, intra_op_threads (repeat for more)",
    )
    sweep.add_argument("--p95-budget-ms", type=float, required=True)


def _options(args: argparse.Namespace) -> Any:
    from servinglib.bench._run import BenchOptions

    return BenchOptions(
        url=(args.url or "").rstrip("/"),
        model=args.model,
        version=args.model_version,
        protocol=args.protocol,
        grpc_address=args.grpc_address,
        concurrency=[int(c) for c in args.concurrency],
        rates=args.rate,
        seconds=args.seconds,
        count=args.requests,
        warmup_s=args.warmup,
        rounds=args.rounds,
        inputs=args.inputs,
        config=args.config,
        label=args.label,
    )


def run(args: argparse.Namespace) -> int:
    """Run ``bench`` or ``bench sweep``; ServinglibError propagates to the CLI (exit 2)."""
    from servinglib.errors import ConfigError

    if not args.model:
        raise ConfigError("bench needs --model NAME")
    if args.url is None and args.config is None:
        raise ConfigError("bench needs --url of a running server or --config to start one")
    if args.url and not args.url.startswith(("http://", "https://")):
        raise ConfigError(f"--url {args.url}: expected http://HOST:PORT")
    if getattr(args, "bench_command", None) == "sweep":
        return _sweep(args)
    from servinglib.bench._compare import compare_runs, load_run
    from servinglib.bench._report import write_report
    from servinglib.bench._run import run_bench
    from servinglib.bench._server import started_server

    base = load_run(args.compare) if args.compare else None
    options = _options(args)
    with ExitStack() as stack:
        if not args.url:
            server = stack.enter_context(started_server(args.config, grpc=args.protocol == "grpc"))
            options.url, options.grpc_address = server.url, server.grpc_address
        document = run_bench(options)
    for path in write_report(document, args.out):
        print(f"wrote {path}")
    if base is not None:
        print(compare_runs(base, document))
    failed = any(level["median"]["errors"] for level in document["levels"])
    return EXIT_FAILED if failed else EXIT_OK


def _sweep(args: argparse.Namespace) -> int:
    from servinglib.bench._sweep import parse_grid, run_sweep, snippet
    from servinglib.errors import ConfigError

    if args.config is None:
        raise ConfigError("bench sweep starts the server itself: pass --config")
    result = run_sweep(Path(args.config), _options(args), parse_grid(args.grid), args.p95_budget_ms)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"{'settings':<60} {'level':>6} {'answers/s':>10} {'p95 ms':>8}")
    for point in result["points"]:
        mark = " *" if point is result["best"] else ""
        print(
            f"{json.dumps(point['settings']):<60} {point['level']:>6g} "
            f"{point['throughput_rps']:>10,.1f} {point['p95_ms']:>8.2f}{mark}"
        )
    print(f"wrote {args.out / 'sweep.json'}")
    best = result["best"]
    if best is None:
        print(f"no point fits p95 <= {args.p95_budget_ms:g} ms without errors", file=sys.stderr)
        return EXIT_FAILED
    text = snippet(args.model, best["settings"])
    (args.out / "best.yaml").write_text(text, encoding="utf-8")
    print(
        f"best under p95 {args.p95_budget_ms:g} ms (*): {json.dumps(best['settings'])}; "
        f"wrote {args.out / 'best.yaml'}:\n{text}",
        end="",
    )
    return EXIT_OK
