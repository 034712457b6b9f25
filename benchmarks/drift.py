"""Cost of drift monitoring: the same service with and without a reference profile.

    python benchmarks/drift.py [--seconds 2] [--repeats 15]

Two scenarios, each with both servers up at once and the runs taken in turn, off-on-on-off
or on-off-off-on per round (so a slow spell of the machine hits both alike); the loss is the
median over rounds of the on/off requests/s ratio:

* trivial: the sum-of-16-floats model at concurrency 8 (monitored: the 16-float vector by
  its norm, the sum); bar: at most 5 % fewer requests/s with monitoring on;
* minilm: the text-in MiniLM INT8 example at concurrency 32 (monitored: the text by its
  length, the embedding by its norm); bar: at most 2 % fewer requests/s.

"Off" is the same service without ``profile.json``: the per-request cost is then one dict
lookup. Results go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _cpu import tree_cpu_seconds
from _load import LoadResult, Server, pooled, run_hey
from run import HEADER, ROOT, TRIVIAL_BODY, _machine, start_servinglib, write_docs

from servinglib.drift_offline.building import profile_version

EXAMPLE = ROOT / "examples/sentence-embeddings"
SENTENCE = "The quick brown fox jumps over the lazy dog while the server batches requests for speed"


def _trivial_services(workdir: Path) -> dict[bool, Path]:
    rng = random.Random(0)
    data = workdir / "trivial.jsonl"
    data.write_text(
        "\n".join(json.dumps({"values": [rng.random() for _ in range(16)]}) for _ in range(2000))
    )
    configs = {}
    for monitored in (False, True):
        service = workdir / f"trivial-{'on' if monitored else 'off'}"
        shutil.copytree(ROOT / "benchmarks/services/trivial", service)
        configs[monitored] = service / "servinglib.yaml"
        if monitored:
            profile_version(configs[monitored], "summer16", "1", data=data)
    return configs


def _minilm_services(workdir: Path) -> dict[bool, Path]:
    if not (EXAMPLE / "models/minilm/2/model.onnx").is_file():
        raise SystemExit("run python examples/sentence-embeddings/prepare.py first")
    data = workdir / "sentences.jsonl"
    lines = [s for s in (EXAMPLE / "sentences.txt").read_text().splitlines() if s.strip()]
    data.write_text("\n".join(json.dumps({"text": s}) for s in lines))
    configs = {}
    for monitored in (False, True):
        service = workdir / f"minilm-{'on' if monitored else 'off'}"
        (service / "models/minilm").mkdir(parents=True)
        shutil.copy(EXAMPLE / "servinglib.yaml", service / "servinglib.yaml")
        shutil.copy(EXAMPLE / "models/minilm/model.py", service / "models/minilm/model.py")
        shutil.copytree(EXAMPLE / "models/minilm/2", service / "models/minilm/2")
        configs[monitored] = service / "servinglib.yaml"
        if monitored:
            profile_version(configs[monitored], "minilm", "2", data=data)
    return configs


def _timed_run(
    server: Server, label: str, body: object, concurrency: int, seconds: float
) -> tuple[LoadResult, float]:
    """One load run and the server's CPU seconds over it (every worker included)."""
    before = tree_cpu_seconds(server.process.pid)
    result = run_hey(label, f"{server.url}/infer", body, concurrency, seconds)
    used = tree_cpu_seconds(server.process.pid) - before
    if set(result.statuses) != {200}:
        raise SystemExit(f"{label}: answers other than 200: {result.statuses}")
    return result, used


def side_by_side(
    configs: dict[bool, Path],
    body: object,
    concurrency: int,
    seconds: float,
    repeats: int,
    workdir: Path,
    name: str,
    drift_of: tuple[str, str],
) -> Outcome:
    """Both servers up at once; each round loads them off-on-on-off (or on-off-off-on)."""
    labels = {False: f"{name}, drift monitoring off", True: f"{name}, drift monitoring on"}
    servers = {m: start_servinglib(config, workdir) for m, config in configs.items()}
    runs: dict[bool, list[LoadResult]] = {False: [], True: []}
    cpu = {False: 0.0, True: 0.0}
    ratios = []
    try:
        for server in servers.values():
            run_hey("warm-up", f"{server.url}/infer", body, concurrency, 2)
        for round_ in range(repeats):
            first = round_ % 2 == 1
            rps: dict[bool, float] = {False: 0.0, True: 0.0}
            for m in (first, not first, not first, first):  # a linear trend cancels out
                result, used = _timed_run(servers[m], labels[m], body, concurrency, seconds)
                runs[m].append(result)
                cpu[m] += used
                rps[m] += result.rps
            ratios.append(rps[True] / rps[False])
            print(f"{name}: round {round_ + 1}/{repeats}: on/off {ratios[-1]:.3f}", flush=True)
        model, version = drift_of
        url = f"{servers[True].url}/v2/models/{model}/versions/{version}/drift"
        with urllib.request.urlopen(url) as response:
            drift = json.loads(response.read())
        print(f"{name}: {drift['requests']} requests in the drift window", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    off, on = pooled(runs[False]), pooled(runs[True])
    return Outcome(
        off,
        on,
        statistics.median(ratios),
        tuple(ratios),
        1e6 * cpu[False] / off.requests,
        1e6 * cpu[True] / on.requests,
    )


@dataclass(frozen=True)
class Outcome:
    """Every run of each setup pooled, the round ratios, and server CPU per request."""

    off: LoadResult
    on: LoadResult
    ratio: float  # median over rounds of on/off requests/s
    ratios: tuple[float, ...]
    cpu_off_us: float
    cpu_on_us: float


def render(results: dict[str, Outcome], command: str) -> str:
    bars = {"trivial": 5.0, "MiniLM INT8 text-in": 2.0}
    lines = [
        "<!-- bench:drift:start -->",
        "### Cost of drift monitoring (reference profile on vs off)",
        "",
        f"Command: `{command}`  ",
        f"Machine: {_machine()}.",
        "",
        HEADER,
    ]
    for outcome in results.values():
        lines += [outcome.off.row(), outcome.on.row()]
    lines.append("")
    verdicts = []
    for name, outcome in results.items():
        loss = 100 * (1 - outcome.ratio)
        quartiles = statistics.quantiles(outcome.ratios, n=4)
        cpu = 100 * (outcome.cpu_on_us / outcome.cpu_off_us - 1)
        verdicts.append(
            f"- {name}: **{loss:+.1f} %** fewer requests/s with monitoring on (bar <= "
            f"{bars[name]:g} %{'' if loss <= bars[name] else ', MISSED'}): the median of "
            f"{len(outcome.ratios)} rounds' on/off ratios (quartiles {quartiles[0]:.3f} and "
            f"{quartiles[2]:.3f}). Server CPU per request: {outcome.cpu_off_us:.0f} us off, "
            f"{outcome.cpu_on_us:.0f} us on ({cpu:+.1f} %)."
        )
    lines += verdicts
    lines += [
        "",
        "Both servers of a scenario run at once. A round loads them in turn for the same "
        "time, off-on-on-off or on-off-off-on (alternating), so a machine growing busier or "
        "quieter during the round hits both alike; its ratio is the on server's requests/s "
        "over the off server's, and the loss is the median over rounds. Each row pools every "
        "run of its setup. Server CPU per request (every gunicorn process, from /proc) is "
        "shown beside it: it depends less on the machine's other load, and where it differs "
        "from the ratio it is the figure to size capacity with. "
        "Monitoring on: each answered request is queued; every 256th request, and a "
        "background thread four times a second, bins the queue on the profile.",
        "",
        "<!-- bench:drift:end -->",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one run")
    parser.add_argument("--repeats", type=int, default=15, help="rounds of four runs")
    parser.add_argument("--only", choices=["trivial", "minilm"], action="append")
    args = parser.parse_args()
    chosen = args.only or ["trivial", "minilm"]
    results: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="servinglib-drift-") as tmp:
        workdir = Path(tmp)
        if "trivial" in chosen:
            results["trivial"] = side_by_side(
                _trivial_services(workdir),
                TRIVIAL_BODY,
                8,
                args.seconds,
                args.repeats,
                workdir,
                "trivial",
                ("summer16", "1"),
            )
        if "minilm" in chosen:
            body = {"model_id": "minilm", "features": {"text": SENTENCE}}
            results["MiniLM INT8 text-in"] = side_by_side(
                _minilm_services(workdir),
                body,
                32,
                args.seconds,
                args.repeats,
                workdir,
                "MiniLM INT8 text-in",
                ("minilm", "2"),
            )
    command = "python benchmarks/drift.py " + " ".join(sys.argv[1:])
    block = render(results, command.strip())
    write_docs("drift", block)
    print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
