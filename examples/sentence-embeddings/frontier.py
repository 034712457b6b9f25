"""The MiniLM student frontier: cosine to the teacher against speed over L6-INT8, one run.

Each student is derived from all-MiniLM-L6-v2 (``derive_student``: ``keep`` evenly spaced
encoder layers, every weight from the teacher), optionally with a share of the attention
heads of every layer removed (``prune_heads``, by magnitude), then distilled with the same
fixed budget (the same generated sentences, epochs, batch and learning rate; cosine loss on
the normalized embedding), exported and quantized like the teacher (dynamic INT8, per
channel). On the held-out ``sentences.txt``: mean cosine to the FP32 teacher and
nearest-neighbour agreement; every INT8 model (and L6-INT8) timed interleaved, p50 at batch
1 and throughput at batch 32. Writes ``frontier.json`` and ``frontier.png``.

Usage (from the repository root; about 5 minutes of one core for the defaults)::

    HF_HUB_OFFLINE=1 nice python examples/sentence-embeddings/frontier.py \\
        --students L2,L3,L4,L4h50 --train-sentences 600 --epochs 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def parse_student(name: str) -> tuple[int, float]:
    """``L3`` → (3 layers, no heads removed); ``L4h50`` → (4 layers, 50 % of heads removed)."""
    layers, _, heads = name[1:].partition("h")
    return int(layers), int(heads or 0) / 100


def cpu_seconds() -> float:
    """User + system CPU time of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from distill import encode, encoder, generated_sentences

    from servinglib.optimize.distill import DistillSettings, derive_student, distill
    from servinglib.optimize.export import export_module
    from servinglib.optimize.heads import prune_heads
    from servinglib.optimize.quantize import QuantizeOptions, quantize_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", default="L2,L3,L4,L4h50")
    parser.add_argument("--train-sentences", type=int, default=600)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--out", type=Path, default=HERE / "build" / "frontier")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    calibration = [line for line in (HERE / "calibration.txt").read_text().splitlines() if line]
    held_out = [line for line in (HERE / "sentences.txt").read_text().splitlines() if line]
    train = encode(generated_sentences(args.train_sentences) + calibration[::2])
    valid = encode(calibration[1::2])
    teacher = encoder()
    sample = {k: v[:2] for k, v in encode(held_out[:2]).items()}
    axes = {"input_ids": {1: "sequence"}, "attention_mask": {1: "sequence"}}

    def export(name: str, module: Any) -> Path:
        fp32, int8 = out / f"{name}.onnx", out / f"{name}-int8.onnx"
        export_module(
            module,
            sample,
            fp32,
            output_names=["sentence_embedding"],
            dynamic_axes=axes,
            allow_trace_warnings=True,
        )
        quantize_model(fp32, int8, QuantizeOptions(method="dynamic", per_channel=True))
        return int8

    models = {"L6-INT8": export("L6", teacher)}
    training: dict[str, dict[str, Any]] = {}
    for name in args.students.split(","):
        layers, heads = parse_student(name)
        student = derive_student(teacher, keep_layers=layers)
        if heads:
            prune_heads(student, heads)
        cpu, wall = cpu_seconds(), time.perf_counter()
        result = distill(
            teacher,
            student,
            train,
            valid,
            DistillSettings(
                loss="cosine",
                epochs=args.epochs,
                patience=0,
                lr=args.lr,
                batch_size=32,
                progress=False,
            ),
        )
        training[name] = {
            "params": result.student_params,
            "untrained_cosine": result.untrained_value,
            "history": list(result.history),
            "train_cpu_s": cpu_seconds() - cpu,
            "train_wall_s": time.perf_counter() - wall,
        }
        print(name, json.dumps(training[name]), flush=True)
        models[f"{name}-INT8"] = export(name, result.student)
    rows = judge(models, teacher, encode(held_out))
    summary = {
        "train_sentences": len(train["input_ids"]),
        "epochs": args.epochs,
        "lr": args.lr,
        "held_out_sentences": len(held_out),
        "training": training,
        "models": rows,
    }
    (out / "frontier.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot(rows, out / "frontier.png")
    print(json.dumps(summary, indent=2))


def judge(models: dict[str, Path], teacher: Any, test: dict[str, np.ndarray]) -> dict[str, Any]:
    """distill.py's judgement of every model, with its speed-up over L6-INT8."""
    from distill import judge as judge_models

    rows = judge_models(models, teacher, test)
    base = rows["L6-INT8"]["samples_per_s_batch32"]
    for row in rows.values():
        row["speedup_vs_L6_INT8"] = row["samples_per_s_batch32"] / base
    return rows


def plot(rows: dict[str, dict[str, Any]], path: Path) -> None:
    """Mean cosine against the speed-up over L6-INT8, the target corner shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.axhspan(0.95, 1.0, xmin=0, xmax=1, color="#e6f2e6")
    ax.axvline(1.8, color="#999", linestyle="--", linewidth=1)
    ax.axhline(0.95, color="#999", linestyle="--", linewidth=1)
    for name, row in rows.items():
        x, y = row["speedup_vs_L6_INT8"], row["mean_cosine"]
        ax.plot([x], [y], marker="o", color="#2a7ab9")
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(6, -4))
    ax.set_xlabel("throughput at batch 32 / L6-INT8")
    ax.set_ylabel("mean cosine to the FP32 teacher")
    ax.set_title("MiniLM students (INT8): target ≥ 1.8x at ≥ 0.95")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
