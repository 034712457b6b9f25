"""Train both versions of the breast-cancer classifier and write their artifacts.

Data: scikit-learn's bundled Wisconsin diagnostic breast-cancer set (569 samples, 30
measurements). One stratified train/test split with a fixed seed, standardisation fitted on the
training part, then a logistic regression per version:

- version 1: strong regularisation (C=0.01), all 30 features;
- version 2: C=1.0.

For each version ``<out>/<version>/`` receives ``weights.npz`` (plain arrays, no pickle) and
``test_data.json`` (5 held-out samples with the output the served model must give). The
script also writes ``request.json``, a ready-made ``POST /infer`` body. Every run writes
byte-identical files.

Usage, from this directory::

    python train.py
    python train.py --out /tmp/breast_cancer --request /tmp/request.json
"""

from __future__ import annotations

import argparse
import io
import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

HERE = Path(__file__).resolve().parent
MODEL_NAME = "breast-cancer"
RANDOM_STATE = 42
TEST_SIZE = 0.25
# version -> inverse regularisation strength C of the logistic regression
VERSIONS: dict[str, float] = {"1": 0.01, "2": 1.0}
TOLERANCE = {"atol": 1e-6, "rtol": 1e-6}
THRESHOLD = 0.5
# A fixed timestamp for the members of weights.npz, so the file is byte-identical every run.
ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]


@dataclass(frozen=True)
class Split:
    """The train/test split; ``y`` is True for malignant."""

    x_train: FloatArray
    x_test: FloatArray
    y_train: BoolArray
    y_test: BoolArray
    rows_test: IntArray  # row of each test sample in load_breast_cancer()
    feature_names: tuple[str, ...]


@dataclass(frozen=True)
class Weights:
    """What a version's weights.npz holds."""

    mean: FloatArray
    scale: FloatArray
    coef: FloatArray
    intercept: float


def load_split() -> Split:
    """The stratified train/test split every version is trained and evaluated on."""
    data = load_breast_cancer()
    x = np.asarray(data.data, dtype=np.float64)
    # scikit-learn's target is 0 = malignant, 1 = benign; the model predicts malignancy.
    malignant = np.asarray(data.target == 0)
    rows_train, rows_test = train_test_split(
        np.arange(len(x)), test_size=TEST_SIZE, random_state=RANDOM_STATE, stratify=malignant
    )
    return Split(
        x_train=x[rows_train],
        x_test=x[rows_test],
        y_train=malignant[rows_train],
        y_test=malignant[rows_test],
        rows_test=np.asarray(rows_test, dtype=np.intp),
        feature_names=tuple(str(name) for name in data.feature_names),
    )


def probability_malignant(x: FloatArray, weights: Weights) -> FloatArray:
    """The served model's formula, for rows of ``x`` (n, 30)."""
    logits = ((x - weights.mean) / weights.scale) @ weights.coef + weights.intercept
    result: FloatArray = np.exp(-np.logaddexp(0.0, -logits))
    return result


def fit(split: Split, c: float) -> Weights:
    """Standardise, fit a logistic regression and export it as plain arrays."""
    scaler = StandardScaler().fit(split.x_train)
    classifier = LogisticRegression(C=c, max_iter=10_000)
    classifier.fit(scaler.transform(split.x_train), split.y_train)
    if classifier.classes_.tolist() != [False, True]:
        raise RuntimeError(f"unexpected classes {classifier.classes_.tolist()}")
    weights = Weights(
        mean=np.asarray(scaler.mean_, dtype=np.float64),
        scale=np.asarray(scaler.scale_, dtype=np.float64),
        coef=np.asarray(classifier.coef_[0], dtype=np.float64),
        intercept=float(classifier.intercept_[0]),
    )
    # The exported arrays must reproduce scikit-learn's own P(malignant).
    reference = classifier.predict_proba(scaler.transform(split.x_test))[:, 1]
    if not np.allclose(probability_malignant(split.x_test, weights), reference, atol=1e-12):
        raise RuntimeError("exported weights disagree with the fitted model")
    return weights


def accuracy(split: Split, weights: Weights) -> float:
    """Share of held-out samples labelled correctly."""
    predicted = probability_malignant(split.x_test, weights) >= THRESHOLD
    return float(np.mean(predicted == split.y_test))


def label(p: float) -> str:
    """The label the model answers for probability ``p``."""
    return "malignant" if p >= THRESHOLD else "benign"


def pick_cases(split: Split, probabilities: FloatArray) -> list[tuple[int, str]]:
    """Five held-out samples: two malignant, two benign, and the least certain of the rest."""
    malignant = np.flatnonzero(split.y_test)[:2]
    benign = np.flatnonzero(~split.y_test)[:2]
    chosen = [int(i) for i in (*malignant, *benign)]
    picked = [(i, "") for i in chosen]
    by_doubt = np.argsort(np.abs(probabilities - THRESHOLD), kind="stable")
    borderline = next(int(i) for i in by_doubt if int(i) not in chosen)
    return [*picked, (borderline, ", closest to the decision boundary")]


def test_data(split: Split, weights: Weights) -> dict[str, Any]:
    """The self-test document of one version."""
    probabilities = probability_malignant(split.x_test, weights)
    cases = []
    for i, note in pick_cases(split, probabilities):
        diagnosis = "malignant" if split.y_test[i] else "benign"
        # One row at a time, exactly as predict() computes it.
        p = float(probability_malignant(split.x_test[i][np.newaxis, :], weights)[0])
        cases.append(
            {
                "name": f"row {split.rows_test[i]}, diagnosed {diagnosis}{note}",
                "input": {"measurements": split.x_test[i].tolist()},
                "expected": {"probability_malignant": p, "label": label(p)},
                "tolerance": dict(TOLERANCE),
            }
        )
    return {"cases": cases}


def save_npz(path: Path, arrays: dict[str, npt.NDArray[Any]]) -> None:
    """Like ``np.savez`` but byte-identical every run (fixed member timestamps)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.asarray(array), allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{name}.npy", ZIP_DATE_TIME), buffer.getvalue())


def write_json(path: Path, document: Any) -> None:
    """JSON with a trailing newline."""
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def train(out: Path, request: Path) -> dict[str, float]:
    """Train every version into ``out``, write ``request``; returns held-out accuracies."""
    split = load_split()
    accuracies: dict[str, float] = {}
    for version, c in VERSIONS.items():
        weights = fit(split, c)
        version_dir = out / version
        version_dir.mkdir(parents=True, exist_ok=True)
        save_npz(
            version_dir / "weights.npz",
            {
                "mean": weights.mean,
                "scale": weights.scale,
                "coef": weights.coef,
                "intercept": np.asarray(weights.intercept, dtype=np.float64),
                "feature_names": np.array(split.feature_names),
            },
        )
        write_json(version_dir / "test_data.json", test_data(split, weights))
        accuracies[version] = accuracy(split, weights)
        correct = round(accuracies[version] * len(split.y_test))
        print(
            f"version {version} (C={c}): held-out accuracy {accuracies[version]:.4f} "
            f"({correct}/{len(split.y_test)})"
        )
    first_malignant = int(np.flatnonzero(split.y_test)[0])
    request.parent.mkdir(parents=True, exist_ok=True)
    write_json(
        request,
        {
            "model_id": MODEL_NAME,
            "features": {"measurements": split.x_test[first_malignant].tolist()},
        },
    )
    return accuracies


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "models" / "breast_cancer",
        help="model repository to write the version directories into (default: %(default)s)",
    )
    parser.add_argument(
        "--request",
        type=Path,
        default=HERE / "request.json",
        help="where to write the example /infer request body (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    train(args.out, args.request)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
