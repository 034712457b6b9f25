"""Stress check of `servinglib optimize run`'s speed claims on a model INT8 does not speed up.

    python benchmarks/optimize_claims.py [--runs 10] [--rounds 15]

The model is a small MLP (16 -> 64 -> 64 -> 4, batch of one): its single requests cost a few
microseconds of operator overhead, and dynamic INT8 only adds quantization nodes, so INT8
is no faster. The script runs ``optimize run --method dynamic`` ``--runs`` times (default
options but ``--repeats 5``) and keeps every speed line it prints, then measures FP32 and
the INT8 model it wrote independently: ONNX Runtime sessions of its own (one thread), the
two models taking turns request by request, ``--rounds`` rounds; for each figure (p50, p95,
throughput at batch 32) the interval of the per-round FP32/INT8 ratios.

A run passes when every speed-up or slow-down it states lies inside that interval and
points the same way; "no measurable difference" always passes. The script exits 1 when
any run fails, and prints each run's lines and the intervals.
"""

from __future__ import annotations

import argparse
import itertools
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
CLAIM = re.compile(r"^speed: (p50|p95|throughput) (\d+\.\d+)x (faster|slower) ")


def write_model(path: Path) -> None:
    """A 16 -> 64 -> 64 -> 4 MLP built with onnx.helper (MatMul + Relu)."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(0)
    sizes = [16, 64, 64, 4]
    nodes, inits, current = [], [], "x"
    for i, (rows, cols) in enumerate(itertools.pairwise(sizes)):
        inits.append(
            numpy_helper.from_array(rng.normal(0, 0.3, (rows, cols)).astype(np.float32), f"w{i}")
        )
        nodes.append(helper.make_node("MatMul", [current, f"w{i}"], [f"m{i}"], name=f"fc{i}"))
        current = f"m{i}"
        if i < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [current], [f"r{i}"], name=f"relu{i}"))
            current = f"r{i}"
    nodes[-1].output[0] = "logits"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))


def tool_run(model: Path, validation: Path, out: Path) -> list[str]:
    """One `optimize run`; its speed lines."""
    command = [
        sys.executable, "-m", "servinglib.optimize.cli", "run", str(model),
        "--validation", str(validation), "--method", "dynamic", "--repeats", "5",
        "--no-progress", "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPOSITORY, check=False)
    if done.returncode != 0:
        raise SystemExit(f"optimize run failed ({done.returncode}):\n{done.stderr}")
    return [line for line in done.stdout.splitlines() if line.startswith("speed: ")]


def interleaved(fp32: Path, int8: Path, rounds: int) -> dict[str, tuple[float, float, float]]:
    """Per figure: (lowest, median, highest) per-round FP32/INT8 ratio, taking turns."""
    import onnxruntime as ort

    def session(path: Path) -> ort.InferenceSession:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    sessions = {"fp32": session(fp32), "int8": session(int8)}
    x = np.random.default_rng(5).normal(size=(1, 16)).astype(np.float32)
    batch = np.random.default_rng(6).normal(size=(32, 16)).astype(np.float32)
    for s in sessions.values():
        for _ in range(200):
            s.run(None, {"x": x})
    ratios: dict[str, list[float]] = {"p50": [], "p95": [], "throughput": []}
    for _ in range(rounds):
        times: dict[str, list[float]] = {"fp32": [], "int8": []}
        for _ in range(300):
            for name, s in sessions.items():
                start = time.perf_counter()
                s.run(None, {"x": x})
                times[name].append(time.perf_counter() - start)
        spent = {"fp32": 0.0, "int8": 0.0}
        while min(spent.values()) < 0.2:
            for name, s in sessions.items():
                start = time.perf_counter()
                s.run(None, {"x": batch})
                spent[name] += time.perf_counter() - start
        for figure, q in (("p50", 50), ("p95", 95)):
            ratios[figure].append(
                float(np.percentile(times["fp32"], q) / np.percentile(times["int8"], q))
            )
        ratios["throughput"].append(spent["fp32"] / spent["int8"])
    return {f: (min(r), float(np.median(r)), max(r)) for f, r in ratios.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="optimize-claims-") as tmp:
        work = Path(tmp)
        write_model(work / "mlp.onnx")
        np.savez(
            work / "valid.npz", x=np.random.default_rng(1).normal(size=(64, 16)).astype(np.float32)
        )
        lines = [
            tool_run(work / "mlp.onnx", work / "valid.npz", work / "int8" / "mlp.onnx")
            for _ in range(args.runs)
        ]
        intervals = interleaved(work / "mlp.onnx", work / "int8" / "mlp.onnx", args.rounds)
    print(f"independent interleaved measurement, {args.rounds} rounds (FP32 time / INT8 time):")
    for figure, (low, median, high) in intervals.items():
        print(f"  {figure}: median {median:.3f}x, rounds {low:.3f}-{high:.3f}x")
    failures = 0
    claims = 0
    for number, run_lines in enumerate(lines, start=1):
        print(f"run {number}:")
        for line in run_lines:
            match = CLAIM.match(line)
            verdict = "ok"
            if match:
                claims += 1
                figure, shown, direction = match.group(1), float(match.group(2)), match.group(3)
                ratio = shown if direction == "faster" else 1.0 / shown
                low, _, high = intervals[figure]
                if not low <= ratio <= high:
                    verdict = f"OUTSIDE {low:.3f}-{high:.3f}"
                    failures += 1
            print(f"  {line}  [{verdict}]")
    print(f"{args.runs} runs, {claims} speed claims, {failures} outside the interval")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
