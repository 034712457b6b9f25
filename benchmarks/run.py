"""Serving benchmarks, side by side in one run; results go to docs/benchmarks.md.

    python benchmarks/run.py                 # every scenario (about 20 minutes on 2 cores)
    python benchmarks/run.py --only trivial --seconds 5
    python benchmarks/run.py --skip-peers    # without MLServer and LitServe

Scenarios (the load generator is Debian's `hey`, on the same machine):
* trivial: serving overhead on a sum-of-16-floats model at concurrency 8: servinglib (metrics
  and JSON request log on) vs the naive Flask + gunicorn app, the seed's FastAPI + uvicorn +
  ThreadPoolExecutor design, and MLServer and LitServe (as shipped and tuned), the last two
  installed on first use in their own venvs under .venv-peers/ (benchmarks/peers/);
* minilm: MiniLM INT8 at concurrency 1-64 against the in-process limit and five peers, with
  a plot (benchmarks/minilm.py);
* shadow: latency cost of shadowing every request to a version 10x slower than the primary;
* overload: a fixed-cost model at 1x and 2x its saturation throughput, bounded queue.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _load import LoadResult, Server, free_port, median_of, pooled, run_hey

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "benchmarks.md"
TRIVIAL_BODY = {"model_id": "summer16", "features": {"values": [0.5] * 16}}
BIN = Path(sys.executable).parent


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVINGLIB_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def start_servinglib(
    config: Path,
    workdir: Path,
    workers: int = 2,
    threads: int = 8,
    source: Path | None = None,
    env: dict[str, str] | None = None,
) -> Server:
    """``servinglib serve`` on a free port; ``source``: another source tree to run instead
    (or a directory to put first on the path); ``env``: more environment variables."""
    port = free_port()
    command = [
        str(BIN / "servinglib"),
        "serve",
        "--config",
        str(config),
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--threads",
        str(threads),
    ]
    extra = dict(env or {})
    if source is not None:
        extra["PYTHONPATH"] = str(source)
    return Server(command, port, "/readyz", workdir, _env(**extra))


def scenario_trivial(
    seconds: float,
    repeats: int,
    workdir: Path,
    skip_peers: bool = False,
    baseline: tuple[Path, str] | None = None,
) -> list[LoadResult]:
    """Serving overhead of every setup, runs interleaved; the median of ``repeats`` is kept.

    ``baseline``: another source tree of servinglib and its label, served alongside.
    """
    trivial = ROOT / "benchmarks/services/trivial/servinglib.yaml"
    servers: dict[str, tuple[Callable[[], Server], str, Any]] = {
        "servinglib (2 asyncio workers, metrics + JSON log)": (
            lambda: start_servinglib(trivial, workdir),
            "/infer",
            TRIVIAL_BODY,
        ),
        "naive Flask + gunicorn (gthread 2x8)": (
            lambda: _gunicorn_peer(workdir),
            "/infer",
            TRIVIAL_BODY,
        ),
        "seed design: FastAPI + uvicorn (2 workers) + ThreadPoolExecutor(8)": (
            lambda: _uvicorn_peer(workdir),
            "/infer",
            TRIVIAL_BODY,
        ),
    }
    if baseline is not None:
        source, label = baseline
        servers[f"servinglib {label} (same setup)"] = (
            lambda: start_servinglib(trivial, workdir, source=source),
            "/infer",
            TRIVIAL_BODY,
        )
    if not skip_peers:
        from peers.batching_peers import request_body, start_litserve, start_mlserver

        features = TRIVIAL_BODY["features"]
        for label, start, peer, env in (
            (
                "MLServer 1.7.1 as shipped (1 inference worker, metrics on)",
                start_mlserver,
                "mlserver",
                {"BENCH_MLSERVER_WORKERS": "1", "BENCH_MLSERVER_METRICS": "1"},
            ),
            (
                "MLServer 1.7.1 tuned (inference in the server process, metrics off)",
                start_mlserver,
                "mlserver",
                {},
            ),
            (
                "LitServe 0.2.19 as shipped (1 API server)",
                start_litserve,
                "litserve",
                {"BENCH_LITSERVE_API_SERVERS": "1"},
            ),
            ("LitServe 0.2.19 tuned (2 API servers)", start_litserve, "litserve", {}),
        ):
            path, body = request_body(peer, "trivial", features)
            servers[label] = (
                lambda s=start, e=env: s("trivial", workdir, _env(**e)),
                path,
                body,
            )
    # Every server runs at once (idle ones cost nothing) and the runs go round-robin, so a
    # slow spell of a noisy machine hits every setup alike; the median run is kept.
    started: dict[str, tuple[Server, str, Any]] = {}
    runs: dict[str, list[LoadResult]] = {label: [] for label in servers}
    try:
        for label, (start, path, body) in servers.items():
            server = start()
            started[label] = (server, path, body)
            run_hey(label, server.url + path, body, 8, 2)  # warm-up, discarded
            server.settle()
        labels = list(started)
        for repeat in range(repeats):  # each repeat starts with another server
            turn = repeat % len(labels)
            for label in labels[turn:] + labels[:turn]:
                server, path, body = started[label]
                runs[label].append(run_hey(label, server.url + path, body, 8, seconds))
                server.settle()  # its leftover work (a log backlog) must not slow the next
    finally:
        for server, _, _ in started.values():
            server.stop()
    return [median_of(runs[label]) for label in servers]


def _gunicorn_peer(workdir: Path) -> Server:
    port = free_port()
    command = [
        str(BIN / "gunicorn"),
        "-w",
        "2",
        "-k",
        "gthread",
        "--threads",
        "8",
        "-b",
        f"127.0.0.1:{port}",
        "--log-level",
        "warning",
        "benchmarks.peers.naive_flask:app",
    ]
    return Server(command, port, "/", workdir, _env())


def _uvicorn_peer(workdir: Path) -> Server:
    port = free_port()
    command = [
        str(BIN / "uvicorn"),
        "--workers",
        "2",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "benchmarks.peers.seed_fastapi:app",
    ]
    return Server(command, port, "/", workdir, _env())


def _shadow_service(workdir: Path, shadow: bool) -> Path:
    service = workdir / ("shadowed" if shadow else "plain")
    shutil.copytree(ROOT / "tests/fixtures/shadowing/models", service / "models")
    shadow_yaml = "    shadow:\n      - {version: '3', sample_rate: 1.0}\n" if shadow else ""
    (service / "servinglib.yaml").write_text(
        "service: bench-shadow\nserver: {workers: 2, threads: 8}\n"
        "shadow_executor: {max_concurrency: 4, max_queue: 64}\n"
        "models:\n  - name: scorer\n    class: models/scorer/model.py:BehavingScorer\n"
        f"    repository: models/scorer\n    default_version: '1'\n{shadow_yaml}"
    )
    return service / "servinglib.yaml"


def scenario_shadow(seconds: float, repeats: int, workdir: Path) -> list[LoadResult]:
    """Both servers run side by side; runs alternate between them; latencies are pooled."""
    body = {"model_id": "scorer", "features": {"x": 1.0}}
    labels = {False: "no shadow", True: "shadow 100% to a 10x slower version"}
    servers = {
        shadow: start_servinglib(_shadow_service(workdir, shadow), workdir)
        for shadow in (False, True)
    }
    runs: dict[bool, list[LoadResult]] = {False: [], True: []}
    try:
        for shadow, server in servers.items():
            run_hey(labels[shadow], f"{server.url}/infer", body, 4, 2, rate_per_worker=25)
        for _ in range(repeats):
            for shadow, server in servers.items():
                runs[shadow].append(
                    run_hey(
                        labels[shadow], f"{server.url}/infer", body, 4, seconds, rate_per_worker=25
                    )
                )
    finally:
        for server in servers.values():
            server.stop()
    return [pooled(runs[False]), pooled(runs[True])]


def scenario_overload(seconds: float, workdir: Path) -> list[LoadResult]:
    service = workdir / "overload"
    shutil.copytree(ROOT / "tests/fixtures/batching/models", service / "models")
    (service / "servinglib.yaml").write_text(
        "service: bench-overload\nmodels:\n  - name: summer\n    class: models/summer/model.py:BatchSummer\n"
        "    repository: models/summer\n    default_version: '1'\n"
        "    batching: {max_batch_size: 1, max_queue_delay_us: 0, max_queue_size: 4}\n"
    )
    body = {"model_id": "summer", "features": {"values": [1, 2, 3]}}
    # One worker: keep-alive connections stick to the worker that accepted them, so with
    # several workers the split of connections, not the load, would decide who sheds.
    server = start_servinglib(service / "servinglib.yaml", workdir, workers=1, threads=16)
    try:
        run_hey("warm-up", f"{server.url}/infer", body, 4, 2)
        # 5 ms per request, one at a time: capacity about 200 requests/s. Closed-loop load:
        # 4 connections keep the worker busy with the queue never full (1x); 8 offer twice that.
        one = run_hey("1x saturation (4 connections)", f"{server.url}/infer", body, 4, seconds)
        two = run_hey("2x saturation (8 connections)", f"{server.url}/infer", body, 8, seconds)
    finally:
        server.stop()
    return [one, two]


HEADER = "| setup | concurrency | requests/s | p50 ms | p95 ms | p99 ms | statuses |\n|---|---|---|---|---|---|---|"


def _servinglib_revision() -> str:
    """The commit measured (the installed metadata's version is fixed when the development
    install was made, so it names an older commit); the version when git cannot tell."""
    git = ["git", "-C", str(ROOT)]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):  # no git, or not a checkout
        return version("servinglib")
    return f"at commit {head}" + (" with local changes" if changed else "")  # docs aside


def _machine() -> str:
    cpu = subprocess.run(
        ["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return (
        f"{os.cpu_count()} cores, {cpu or platform.processor()}; Python {platform.python_version()}; "
        f"servinglib {_servinglib_revision()}, gunicorn {version('gunicorn')}, Flask {version('flask')}, "
        f"FastAPI {_version('fastapi')}, uvicorn {_version('uvicorn')}; load generator `hey` on the "
        "same machine"
    )


def render(name: str, results: list[LoadResult], command: str) -> str:
    """One scenario's section, between markers so other scenarios' sections survive a rerun."""
    lines = [f"<!-- bench:{name}:start -->"]
    if name.startswith("trivial"):
        ours, flask, seed, *others = results
        before = [r for r in others if r.label.startswith("servinglib")]
        peers = [r for r in others if r not in before]
        title = "Serving overhead" if peers else "Serving overhead against the seed design"
        lines += [f"### {title} (sum of 16 floats, concurrency 8)", ""]
    elif name == "shadow":
        plain, shadowed = results
        lines += [
            "### Cost of shadowing (100% of requests to a version 10x slower, 100 req/s offered)",
            "",
        ]
    else:
        one, two = results
        lines += [
            "### Overload (one worker, 5 ms per request, max_queue_size 4, deadline 10 s)",
            "",
        ]
    lines += [
        f"Command: `{command}`  ",
        f"Machine: {_machine()}.",
        "",
        HEADER,
        *[r.row() for r in results],
        "",
    ]
    if name.startswith("trivial"):
        ratios = [f"naive Flask **{ours.rps / flask.rps:.2f}x** (bar 1x)"]
        ratios.append(f"seed FastAPI design **{ours.rps / seed.rps:.2f}x** (bar 1x)")
        ratios += [f"{r.label} **{ours.rps / r.rps:.2f}x**" for r in before]
        ratios += [f"{p.label} **{ours.rps / p.rps:.2f}x** (bar 3x)" for p in peers]
        lines.append("servinglib requests/s against: " + "; ".join(ratios) + ".")
        lines.append(
            "All servers run at once and the runs go round-robin between them, so a slow spell "
            "of the machine hits every setup alike; each run starts once the previous server is "
            "idle; each row is the median run."
        )
    elif name == "shadow":
        lines.append(
            f"Added latency: p50 **{shadowed.p50_ms - plain.p50_ms:+.2f} ms** (target <= 1 ms), "
            f"p99 **{100 * (shadowed.p99_ms / plain.p99_ms - 1):+.1f}%** (target <= 5%). Both "
            "servers run side by side, the load alternates between them run by run, and the "
            f"percentiles are over every request of all runs ({plain.requests:,} per setup). "
            "Each shadow copy is submitted after the primary's response is written."
        )
    else:
        bad = {k: v for k, v in two.statuses.items() if k >= 500 and k != 503}
        lines.append(
            f"At 2x: {two.statuses.get(503, 0)} requests shed with 503, {sum(bad.values())} other "
            f"5xx; p99 of accepted (200) requests {two.p99_ok_ms:.1f} ms vs {one.p99_ok_ms:.1f} ms "
            f"at 1x (**{two.p99_ok_ms / one.p99_ok_ms:.2f}x**, target <= 1.5x); the slowest answers "
            f"(p99 {two.p99_ms:.0f} ms, slowest {two.max_ms:.0f} ms) stay far inside the 10 s deadline."
        )
    lines += ["", f"<!-- bench:{name}:end -->"]
    return "\n".join(lines)


def _version(name: str) -> str:
    try:
        return version(name)
    except Exception:
        return "not installed"


def write_docs(name: str, block: str) -> None:
    """Replace this scenario's section of docs/benchmarks.md (or add it under ## Serving)."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    text = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    if start in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) :]
    else:
        if "## Serving" not in text:
            text = (
                text.rstrip()
                + "\n\n## Serving\n\nRun all scenarios with `python benchmarks/run.py`.\n"
            )
        head, _, tail = text.partition("## Serving")
        first_line, _, rest = tail.partition("\n")
        text = f"{head}## Serving{first_line}\n{block}\n{rest}"
    DOCS.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", choices=["trivial", "minilm", "shadow", "overload"], action="append"
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each measured run")
    parser.add_argument(
        "--repeats", type=int, default=3, help="repeats of the trivial runs (median kept)"
    )
    parser.add_argument(
        "--overload-seconds", type=float, default=60.0, help="length of each overload run"
    )
    parser.add_argument(
        "--skip-peers", action="store_true", help="without MLServer and LitServe (own venvs)"
    )
    parser.add_argument(
        "--minilm-seconds", type=float, default=8.0, help="length of each MiniLM run"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="trivial: also serve another servinglib source tree (git archive REV | tar -x)",
    )
    parser.add_argument("--baseline-label", default="before", help="its label in the table")
    args = parser.parse_args()
    chosen = args.only or ["trivial", "minilm", "shadow", "overload"]
    if "minilm" in chosen:  # its own module: it writes its own section and plot
        import minilm

        minilm.run(
            args.minilm_seconds,
            args.skip_peers,
            "python benchmarks/run.py " + " ".join(sys.argv[1:]),
        )
    sections: dict[str, list[LoadResult]] = {}
    with tempfile.TemporaryDirectory(prefix="servinglib-bench-") as tmp:
        workdir = Path(tmp)
        if "trivial" in chosen:
            baseline = None if args.baseline is None else (args.baseline, args.baseline_label)
            # Without the peers the table is a different one: it gets its own section.
            name = "trivial-seed" if args.skip_peers else "trivial"
            sections[name] = scenario_trivial(
                args.seconds, args.repeats, workdir, args.skip_peers, baseline
            )
        if "shadow" in chosen:
            sections["shadow"] = scenario_shadow(args.seconds, args.repeats, workdir)
        if "overload" in chosen:
            sections["overload"] = scenario_overload(args.overload_seconds, workdir)
    command = ("python benchmarks/run.py " + shlex.join(sys.argv[1:])).strip()
    for name, results in sections.items():
        block = render(name, results, command)
        write_docs(name, block)
        print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
