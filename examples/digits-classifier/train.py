"""Train the digits CNN, export it to ONNX (version 1, FP32) and quantize it (version 2, INT8).

Data: scikit-learn's bundled handwritten digits (``load_digits``: 1,797 images of 8x8
pixels, values 0-16). One stratified split with a fixed seed: 60 % train, 20 % validation,
20 % test. A small CNN (two 3x3 convolutions, max-pooling, two linear layers) is trained
with fixed seeds, single-threaded and with deterministic algorithms, so every run on the
same machine and library versions gives the same weights.

Writes, under ``--out`` (default ``models/digits``) and ``--data`` (default ``data``):

- ``1/model.onnx``: the FP32 model, exported and verified against PyTorch by
  ``servinglib.optimize.export_module``; inputs ``pixels`` [batch, 64] (raw 0-16 values),
  outputs ``logits`` [batch, 10] and ``digit`` [batch];
- ``2/model.onnx``: static INT8 (QDQ), calibrated on 256 training images by
  ``servinglib optimize`` (``optimize_model`` with a fixed static method);
- ``{1,2}/test_data.json``: five test images and the answers each version must give;
- ``data/calibration.npz``, ``data/validation.npz``, ``data/test.npz`` (with labels);
- with ``--reports DIR``: the optimize reports (static, and the accuracy-aware search with
  a 0.3-point budget), which measure latency on this machine.

Usage, from this directory::

    python train.py --reports reports
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from servinglib.optimize import (
    Budgets,
    MeasureSettings,
    OptimizeSettings,
    QuantizeOptions,
    export_module,
    optimize_model,
)

HERE = Path(__file__).resolve().parent
SEED = 0
EPOCHS = 40
BATCH_SIZE = 64
CALIBRATION_SIZE = 256
# The accuracy-aware search may lose at most 0.3 accuracy points on the validation split.
SEARCH_BUDGET = 0.003

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]


class DigitsCNN(torch.nn.Module):
    """8x8 digit images (raw 0-16 pixel values, flattened) -> logits and the predicted digit."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, kernel_size=3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, kernel_size=3, padding=1),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
        )
        self.classifier = torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(32 * 4 * 4, 64),
            torch.nn.ReLU(),
            torch.nn.Linear(64, 10),
        )

    def forward(self, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        images = pixels.reshape(-1, 1, 8, 8) / 16.0
        logits = self.classifier(self.features(images))
        return logits, logits.argmax(dim=1)


@dataclass(frozen=True)
class Split:
    """Train, validation and test images (flattened, float32) and labels."""

    x_train: FloatArray
    y_train: IntArray
    x_val: FloatArray
    y_val: IntArray
    x_test: FloatArray
    y_test: IntArray


def load_split() -> Split:
    """The stratified 60/20/20 split every step uses."""
    digits = load_digits()
    x = np.asarray(digits.data, dtype=np.float32)
    y = np.asarray(digits.target, dtype=np.int64)
    x_train, x_rest, y_train, y_rest = train_test_split(
        x, y, test_size=0.4, random_state=SEED, stratify=y
    )
    x_val, x_test, y_val, y_test = train_test_split(
        x_rest, y_rest, test_size=0.5, random_state=SEED, stratify=y_rest
    )
    return Split(x_train, y_train, x_val, y_val, x_test, y_test)


def train_model(split: Split) -> DigitsCNN:
    """Adam, cross-entropy, fixed seeds; deterministic on a given machine."""
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    model = DigitsCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    x, y = torch.from_numpy(split.x_train), torch.from_numpy(split.y_train)
    generator = torch.Generator().manual_seed(SEED)
    model.train()
    for _ in range(EPOCHS):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), BATCH_SIZE):
            batch = order[start : start + BATCH_SIZE]
            optimizer.zero_grad()
            logits, _ = model(x[batch])
            torch.nn.functional.cross_entropy(logits, y[batch]).backward()
            optimizer.step()
    return model.eval()


def accuracy(model: DigitsCNN, x: FloatArray, y: IntArray) -> float:
    """Share of images whose predicted digit is the label."""
    with torch.no_grad():
        _, digit = model(torch.from_numpy(x))
    return float((digit.numpy() == y).mean())


def save_npz(path: Path, **arrays: npt.NDArray[Any]) -> None:
    """Arrays in a plain .npz (no pickle)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)


def pick_cases(logits: FloatArray, y: IntArray) -> list[int]:
    """Five test images of different digits, each classified right with a clear margin."""
    top2 = np.sort(logits, axis=1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    chosen: list[int] = []
    for digit in (0, 3, 5, 7, 9):
        candidates = np.flatnonzero((y == digit) & (logits.argmax(axis=1) == y))
        chosen.append(int(candidates[np.argmax(margin[candidates])]))
    return chosen


def run_onnx(path: Path, x: FloatArray) -> tuple[FloatArray, IntArray]:
    """Logits and digits of an ONNX version, one image per run (as single requests)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    logits, digits = [], []
    for row in x:
        out = session.run(["logits", "digit"], {"pixels": row[np.newaxis]})
        logits.append(out[0][0])
        digits.append(int(out[1][0]))
    return np.asarray(logits, dtype=np.float32), np.asarray(digits, dtype=np.int64)


def write_test_data(version_dir: Path, x: FloatArray, y: IntArray, atol: float) -> None:
    """Five test images and the answers this version gives them."""
    logits, digits = run_onnx(version_dir / "model.onnx", x)
    cases = []
    for i in pick_cases(logits, y):
        cases.append(
            {
                "name": f"test image {i}, a handwritten {int(y[i])}",
                "input": {"pixels": [x[i].tolist()]},
                "expected": {
                    "logits": [[float(v) for v in logits[i]]],
                    "digit": [int(digits[i])],
                },
                "tolerance": {"atol": atol, "rtol": 0.0},
            }
        )
    document = {"cases": cases}
    (version_dir / "test_data.json").write_text(json.dumps(document, indent=2) + "\n")


def export(model: DigitsCNN, split: Split, out: Path) -> None:
    """Version 1: FP32 ONNX, verified against PyTorch."""
    result = export_module(
        model,
        {"pixels": split.x_test[:2]},
        out / "1" / "model.onnx",
        output_names=["logits", "digit"],
    )
    print(f"version 1: exported, max |ONNX Runtime - PyTorch| = {result.max_abs_error:.2g}")


def quantize_static(out: Path, data: Path, reports: Path | None) -> None:
    """Version 2: static INT8 calibrated on training images; report on the test split."""
    measure = MeasureSettings(repeats=5, iterations=200, warmup=50)
    with tempfile.TemporaryDirectory() as tmp:
        outcome = optimize_model(
            out / "1" / "model.onnx",
            out / "2" / "model.onnx",
            validation=data / "test.npz",
            calibration=data / "calibration.npz",
            report_dir=(reports / "static") if reports else Path(tmp),
            settings=OptimizeSettings(
                # 7-bit weights: u8xs8 sums cannot saturate on CPUs without VNNI, so every
                # CPU computes the same logits and the self-tests hold everywhere
                method=QuantizeOptions(method="static", reduce_range=True),
                metric="accuracy",
                output="logits",
                measure=measure,
                progress=False,
            ),
        )
        if reports is not None:
            search = optimize_model(
                out / "1" / "model.onnx",
                Path(tmp) / "auto" / "model.onnx",
                validation=data / "validation.npz",
                calibration=data / "calibration.npz",
                report_dir=reports / "auto",
                settings=OptimizeSettings(
                    metric="accuracy",
                    output="logits",
                    budgets=Budgets(max_accuracy_loss=SEARCH_BUDGET),
                    measure=measure,
                    progress=False,
                ),
            )
            print(
                f"accuracy-aware search ({SEARCH_BUDGET * 100:.1f}-point budget): "
                f"{search.report.chosen or 'no candidate fits'}"
            )
    accuracy_section = outcome.report.to_dict()["accuracy"]
    print(
        f"version 2 (static INT8): test accuracy {accuracy_section['optimized']:.4f} "
        f"(FP32 {accuracy_section['fp32']:.4f})"
    )


def logits_step(path: Path, x: FloatArray) -> float:
    """One INT8 output step: the smallest gap between distinct logit values.

    Static INT8 logits are dequantized from int8, so they sit on a grid; 500 values over 256
    levels land on neighbouring levels somewhere.
    """
    logits, _ = run_onnx(path, x)
    values = np.unique(np.round(logits.ravel(), 5))
    return float(np.diff(values).min()) if len(values) > 1 else 0.0


def train(
    out: Path, data: Path, reports: Path | None = None, request: Path = HERE / "request.json"
) -> dict[str, float]:
    """Every step; returns the test accuracy of the PyTorch model."""
    split = load_split()
    model = train_model(split)
    result = {
        "validation": accuracy(model, split.x_val, split.y_val),
        "test": accuracy(model, split.x_test, split.y_test),
    }
    print(f"PyTorch: validation accuracy {result['validation']:.4f}, test {result['test']:.4f}")
    rng = np.random.default_rng(SEED)
    calibration = rng.choice(len(split.x_train), CALIBRATION_SIZE, replace=False)
    save_npz(data / "calibration.npz", pixels=split.x_train[np.sort(calibration)])
    save_npz(data / "validation.npz", pixels=split.x_val, labels=split.y_val)
    save_npz(data / "test.npz", pixels=split.x_test, labels=split.y_test)
    export(model, split, out)
    quantize_static(out, data, reports)
    # FP32 outputs are exact up to float rounding; INT8 logits sit on a grid of one
    # quantization step, and another CPU's kernels may land one step away (with 8-bit
    # weights, a CPU without VNNI could saturate and land 3-5 steps away: measured on an AVX2
    # AMD EPYC; the 7-bit weights above rule that out).
    write_test_data(out / "1", split.x_test, split.y_test, atol=1e-4)
    step = logits_step(out / "2" / "model.onnx", split.x_test[:50])
    write_test_data(out / "2", split.x_test, split.y_test, atol=round(2 * step + 1e-3, 3))
    body = {"model_id": "digits", "features": {"pixels": [split.x_test[0].tolist()]}}
    request.write_text(json.dumps(body) + "\n")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=HERE / "models" / "digits")
    parser.add_argument("--data", type=Path, default=HERE / "data")
    parser.add_argument("--reports", type=Path, help="also write optimize reports here")
    parser.add_argument("--request", type=Path, default=HERE / "request.json")
    args = parser.parse_args(argv)
    train(args.out, args.data, args.reports, args.request)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
