"""Composed models against calling their members directly, side by side in one run.

    python benchmarks/composition.py [--seconds 4] [--rounds 3]

Two parts, each driven by `hey` on the same machine; the section of docs/benchmarks.md is
rewritten with the results:

1. Overhead, at concurrency 1: the composition service (benchmarks/services/composition, one
   asyncio worker): a 3-step pipeline whose middle step is a batched ONNX MatMul, and a
   2-member ensemble, each route against its steps or members called directly.
   - pipeline overhead per step: (p50 of the pipeline - sum of the p50s of its three steps
     called directly over HTTP) / 3;
   - ensemble: p50 of the 2-member ensemble against the slower member's p50.
2. MiniLM, at concurrency 32: the text-classification example's pipeline (tokenize -> MiniLM
   INT8 under `runtime: onnx`, batched -> classifier) against the single-model MiniLM example
   (text in, tokenized in `prepare()`), both with 2 workers and the same sentence. Both
   servers are up at once and the runs alternate, the median of the rounds of each: the
   ratio compares the same moments of a noisy machine.

Run it under the benchmark locks of a shared machine::

    flock /tmp/servinglib-bench.lock flock /tmp/servinglib-heavy.lock \\
        python benchmarks/composition.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _load import LoadResult, Server, free_port, median_of, run_hey
from composition_service import composition_service
from run import HEADER, ROOT, _machine, write_docs

VALUES = [1.0, 2.0, 3.0, 4.0]
ROUTES = {
    "prep (step 1, direct)": {"model_id": "prep", "features": {"values": VALUES}},
    "linear (step 2, direct, ONNX)": {"model_id": "linear", "features": {"x": [VALUES]}},
    "head (step 3, direct)": {"model_id": "head", "features": {"y": [[4.0, 6.0]]}},
    "classify (3-step pipeline)": {
        "model_id": "classify",
        "version": "1",
        "features": {"values": VALUES},
    },
    "const (member 1, direct)": {"model_id": "const", "features": {}},
    "flaky (member 2, direct)": {"model_id": "flaky", "features": {}},
    "pair (2-member ensemble)": {"model_id": "pair", "features": {}},
}
SENTENCE = "The quick brown fox jumps over the lazy dog while the server batches requests for speed"
SINGLE = "MiniLM example, one model (text in, 2 workers)"
PIPELINE = "ticket-router pipeline, 3 steps (2 workers)"
MINILM = {
    SINGLE: (ROOT / "examples/sentence-embeddings/servinglib.yaml", "minilm"),
    PIPELINE: (ROOT / "examples/text-classification/servinglib.yaml", "ticket-router"),
}
RATIO_BAR = 0.9


def _serve(config: Path, workdir: Path, workers: int) -> Server:
    port = free_port()
    command = [sys.executable, "-m", "servinglib.cli.main", "serve", "--config", str(config)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVINGLIB_")}
    env.update(SERVINGLIB_LOG_LEVEL="warning", HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    return Server(command, port, "/readyz", workdir, env)


def overhead(seconds: float) -> list[LoadResult]:
    """Every route of the composition service at concurrency 1, one after another."""
    with tempfile.TemporaryDirectory() as directory:
        config = composition_service(Path(directory) / "service")
        server = _serve(config, Path(directory), workers=1)
        try:
            results = []
            for label, body in ROUTES.items():
                run_hey(label, server.url + "/infer", body, 1, 1.0)  # warm up
                result = run_hey(label, server.url + "/infer", body, 1, seconds)
                assert set(result.statuses) == {200}, (label, result.statuses)
                print(result.row(), flush=True)
                results.append(result)
            return results
        finally:
            server.stop()


def minilm(seconds: float, rounds: int) -> dict[str, list[LoadResult]]:
    """Both MiniLM servers up at once, runs at concurrency 32 taken in turn; every run."""
    runs: dict[str, list[LoadResult]] = {label: [] for label in MINILM}
    with tempfile.TemporaryDirectory() as directory:
        servers: dict[str, tuple[Server, dict[str, object]]] = {}
        try:
            for label, (config, model) in MINILM.items():
                body = {"model_id": model, "features": {"text": SENTENCE}}
                servers[label] = (_serve(config, Path(directory), workers=2), body)
            for label, (server, body) in servers.items():
                run_hey(label, server.url + "/infer", body, 32, 2.0)  # warm up
            for round_ in range(rounds):
                for label, (server, body) in servers.items():
                    result = run_hey(label, server.url + "/infer", body, 32, seconds)
                    assert set(result.statuses) == {200}, (label, result.statuses)
                    print(f"round {round_ + 1}: {result.row()}", flush=True)
                    runs[label].append(result)
        finally:
            for server, _ in servers.values():
                server.stop()
    return runs


def render(fixture: list[LoadResult], runs: dict[str, list[LoadResult]], command: str) -> str:
    """The section of docs/benchmarks.md; the MiniLM bar is on the median run of each."""
    duel = {label: median_of(results) for label, results in runs.items()}
    rounds = len(runs[PIPELINE])
    paired = [p.rps / s.rps for p, s in zip(runs[PIPELINE], runs[SINGLE], strict=True)]
    p50 = {r.label: r.p50_ms for r in fixture}
    steps = [p50[k] for k in list(ROUTES)[:3]]
    per_step = (p50["classify (3-step pipeline)"] - sum(steps)) / 3
    slower = max(p50["const (member 1, direct)"], p50["flaky (member 2, direct)"])
    pair = p50["pair (2-member ensemble)"]
    ratio = duel[PIPELINE].rps / duel[SINGLE].rps

    def verdict(ok: bool) -> str:
        return "**holds**" if ok else "**does not hold**"

    return "\n".join(
        [
            "<!-- bench:composition:start -->",
            "## Composed models against their members called directly",
            "",
            f"Command: `{command}`  ",
            f"Machine: {_machine()}; onnxruntime {version('onnxruntime')}.",
            "",
            "Overhead at concurrency 1: one asyncio worker serving the composition service "
            "(`benchmarks/services/composition`: a 3-step pipeline whose middle step is a "
            "batched ONNX MatMul, and a 2-member ensemble), every route one after another. "
            "`hey` reports latency in 0.1 ms steps, so differences under 0.1 ms are not "
            "resolved.",
            "",
            HEADER,
            *[r.row() for r in fixture],
            "",
            f"MiniLM at concurrency 32: the text-classification example's `ticket-router` "
            f"pipeline (tokenize, MiniLM INT8 under `runtime: onnx` batched, classifier) "
            f"against the sentence-embeddings example's single model (text in, tokenized in "
            f"`prepare()`), both with 2 workers and the same {len(SENTENCE.split())}-word "
            f"sentence, both up at once and the runs taken in turn; the median of "
            f"{rounds} rounds of each:",
            "",
            HEADER,
            *[r.row() for r in duel.values()],
            "",
            f"- {verdict(per_step <= 0.3)}: pipeline overhead per step over calling the three "
            f"steps directly (three HTTP requests): ({p50['classify (3-step pipeline)']:.2f} - "
            f"{sum(steps):.2f}) / 3 = {per_step:+.2f} ms (bar 0.3 ms). The direct calls pay an "
            "HTTP round trip each, which the pipeline pays once.",
            f"- {verdict(pair - slower <= 0.5)}: the 2-member ensemble's p50 is "
            f"{pair - slower:+.2f} ms from the slower member's ({pair:.2f} vs {slower:.2f} ms; "
            "bar +0.5 ms): members run at once, not one after the other.",
            f"- {verdict(ratio >= RATIO_BAR)}: the MiniLM pipeline at concurrency 32 answers "
            f"{duel[PIPELINE].rps:,.0f} requests/s, {ratio:.2f}x the single-model example's "
            f"{duel[SINGLE].rps:,.0f} (bar {RATIO_BAR}x). Round by round (runs taken "
            f"back to back): {', '.join(f'{r:.2f}x' for r in paired)}; their median "
            f"{statistics.median(paired):.2f}x.",
            "<!-- bench:composition:end -->",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each load run")
    parser.add_argument("--rounds", type=int, default=3, help="MiniLM rounds at concurrency 32")
    args = parser.parse_args()
    if not (ROOT / "examples/text-classification/models/classify/1/weights.npz").is_file():
        raise SystemExit("run python examples/text-classification/prepare.py first")
    command = ("python benchmarks/composition.py " + " ".join(sys.argv[1:])).strip()
    fixture = overhead(args.seconds)
    runs = minilm(args.seconds, args.rounds)
    block = render(fixture, runs, command)
    write_docs("composition", block)
    print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
