"""Prune the digits CNN (structured), then check the pruned model against the rpi5 profile.

1. trains the CNN as ``train.py`` does (same split, seeds and epochs);
2. ``servinglib.optimize.prune_model``: channel shares 0.25 to 0.6 removed by magnitude,
   fine-tuned on the training labels after each step, each ratio exported to ONNX, judged on
   the validation labels (at most 1 accuracy point lost) and timed interleaved with the
   unpruned ONNX model; the smallest within budget is written to ``build/pruned/model.onnx``
   with ``prune-report.json`` and ``prune-curve.png``;
3. with ``--edge``, ``servinglib optimize edge`` on the unpruned and pruned models: ORT
   format, the rpi5 profile on an emulated one-CPU host, the bundle in ``build/edge``.

Usage, from this directory (a minute or two on one core)::

    python prune.py --edge
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from train import Split, load_split, train_model

from servinglib.optimize.measure import MeasureSettings
from servinglib.optimize.prune import PruneData, PruneSettings, prune_model
from servinglib.optimize.prune_report import write_prune_report

HERE = Path(__file__).resolve().parent
MAX_LOSS = 0.01  # at most one accuracy point below the unpruned model
RATIOS = (0.25, 0.4, 0.5, 0.6)


def test_accuracy(path: Path, split: Split) -> float:
    """Accuracy of an ONNX model on the held-out test split (never used to choose)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"pixels": split.x_test})[0]
    return float(np.mean(logits.argmax(1) == split.y_test))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "build")
    parser.add_argument("--edge", action="store_true", help="then the rpi5 edge check")
    args = parser.parse_args()
    split = load_split()
    model = train_model(split)
    torch.use_deterministic_algorithms(False)
    settings = PruneSettings(
        ratios=RATIOS,
        epochs=5,
        lr=1e-3,
        max_loss=MAX_LOSS,
        output_names=("logits", "digit"),
        measure=MeasureSettings(repeats=7, iterations=200, batch_size=32),
    )
    data = PruneData({"pixels": split.x_train}, {"pixels": split.x_val}, split.y_train, split.y_val)
    destination = args.out / "pruned" / "model.onnx"
    outcome = prune_model(model, data, destination, settings)
    report, figure = write_prune_report(outcome, destination.parent, settings)
    document = json.loads(report.read_text())
    print(json.dumps(document["candidates"], indent=1))
    print(f"chosen ratio: {document['chosen_ratio']}; {report}, {figure}")
    with torch.no_grad():
        logits = model(torch.from_numpy(split.x_test))[0].numpy()
    print(f"test accuracy: unpruned {np.mean(logits.argmax(1) == split.y_test):.4f}", end="")
    if outcome.model is not None:
        print(f", pruned {test_accuracy(outcome.model, split):.4f}")
    if args.edge and outcome.model is not None:
        from servinglib.optimize.cli import main as optimize

        np.savez(args.out / "validation.npz", pixels=split.x_val)
        unpruned = HERE / "models" / "digits" / "1" / "model.onnx"
        validation, bundle = args.out / "validation.npz", args.out / "edge"
        sources = [str(unpruned), str(outcome.model)]
        optimize(["edge", *sources, "--validation", str(validation), "--out", str(bundle)])


if __name__ == "__main__":
    main()
