"""Cost of drift monitoring: the same service with and without a reference profile.

    python benchmarks/drift.py [--seconds 5] [--repeats 9]

Two scenarios, each with both servers up at once and the runs taken in turn (so a slow
spell of the machine hits both alike):

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
from _load import LoadResult, median_of, run_hey
from run import HEADER, ROOT, TRIVIAL_BODY, _machine, start_servinglib, write_docs

from servinglib.monitoring.drift.building import profile_version

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
    """Both servers loaded in turn, round after round."""
    labels = {False: f"{name}, drift monitoring off", True: f"{name}, drift monitoring on"}
    servers = {m: start_servinglib(config, workdir) for m, config in configs.items()}
    runs: dict[bool, list[LoadResult]] = {False: [], True: []}
    try:
        for server in servers.values():
            run_hey("warm-up", f"{server.url}/infer", body, concurrency, 2)
        for round_ in range(repeats):
            order = (False, True) if round_ % 2 == 0 else (True, False)  # cancels trends
            for m in order:
                url = f"{servers[m].url}/infer"
                result = run_hey(labels[m], url, body, concurrency, seconds)
                print(result.row(), flush=True)
                runs[m].append(result)
        model, version = drift_of
        url = f"{servers[True].url}/v2/models/{model}/versions/{version}/drift"
        with urllib.request.urlopen(url) as response:
            drift = json.loads(response.read())
        print(f"{name}: {drift['requests']} requests in the drift window", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    ratios = [on.rps / off.rps for off, on in zip(runs[False], runs[True], strict=True)]
    print(f"{name}: on/off per round {[round(r, 3) for r in ratios]}", flush=True)
    return Outcome(median_of(runs[False]), median_of(runs[True]), statistics.median(ratios))


@dataclass(frozen=True)
class Outcome:
    """The median run of each setup and the median on/off ratio of the paired rounds."""

    off: LoadResult
    on: LoadResult
    ratio: float


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
        rows = 100 * (1 - outcome.on.rps / outcome.off.rps)
        verdicts.append(
            f"{name}: **{loss:+.1f} %** fewer requests/s with monitoring on, median of the "
            f"paired rounds (median rows: {rows:+.1f} %; bar <= {bars[name]:g} %"
            f"{'' if loss <= bars[name] else ', MISSED'})"
        )
    lines.append("; ".join(verdicts) + ".")
    lines.append(
        "Both servers of a scenario run at once; each round loads one then the other (the "
        "order alternates round by round, so a machine growing busier hits both alike), and "
        "the loss is the median over rounds of the on/off ratio of the round. Each row is "
        "the median run. Monitoring on: every answered request is binned on the profile and "
        "counted in the worker's memory-mapped table."
    )
    lines += ["", "<!-- bench:drift:end -->"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=9)
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
