"""Breast-cancer classifier: logistic regression over 30 standardised cell-nucleus measurements.

Each version directory holds ``weights.npz`` (written by ``train.py``, no pickle) with:

- ``mean``, ``scale``: per-feature standardisation, shape (30,);
- ``coef``: logistic-regression coefficients pointing towards *malignant*, shape (30,);
- ``intercept``: a scalar;
- ``feature_names`` (optional): the 30 measurement names, in input order.

``probability_malignant = sigmoid(((x - mean) / scale) @ coef + intercept)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import servinglib
from servinglib import TensorSpec

__all__ = ["N_FEATURES", "BreastCancerClassifier"]

N_FEATURES = 30
THRESHOLD = 0.5

FloatArray = npt.NDArray[np.float64]


class BreastCancerClassifier(servinglib.Model):
    """Answers ``{"measurements": [30 numbers]}`` with the probability the tumour is malignant.

    ``measurements`` may be a list, or a NumPy array of shape (30,) or (1, 30) (the Open
    Inference endpoint hands in arrays). The answer is
    ``{"probability_malignant": float, "label": "malignant" | "benign"}``.
    """

    inputs = (TensorSpec("measurements", "FP64", (N_FEATURES,)),)
    outputs = (
        TensorSpec("probability_malignant", "FP64", (1,)),
        TensorSpec("label", "BYTES", (1,)),
    )

    mean: FloatArray
    scale: FloatArray
    coef: FloatArray
    intercept: float
    feature_names: tuple[str, ...]

    def load(self, path: Path) -> None:
        """Read ``weights.npz`` of one version directory and check every array's shape."""
        with np.load(path / "weights.npz", allow_pickle=False) as weights:
            self.mean = _vector(weights, "mean")
            self.scale = _vector(weights, "scale")
            self.coef = _vector(weights, "coef")
            intercept = np.asarray(_array(weights, "intercept"), dtype=np.float64)
            if intercept.size != 1 or not np.isfinite(intercept).all():
                raise ValueError("weights.npz: intercept must be one finite number")
            self.intercept = float(intercept.reshape(()))
            names = weights["feature_names"] if "feature_names" in weights.files else None
        if not np.all(self.scale > 0):
            raise ValueError("weights.npz: every scale must be > 0")
        if names is not None and names.shape != (N_FEATURES,):
            raise ValueError(f"weights.npz: feature_names must have shape ({N_FEATURES},)")
        self.feature_names = tuple(str(name) for name in names) if names is not None else ()

    def predict(self, features: dict[str, Any]) -> dict[str, Any]:
        """Classify one sample."""
        return self._classify(_measurements(features)[np.newaxis, :])[0]

    def predict_batch(self, batch: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Classify several samples with one matrix product."""
        if not batch:
            return []
        return self._classify(np.stack([_measurements(features) for features in batch]))

    def _classify(self, matrix: FloatArray) -> list[dict[str, Any]]:
        """Rows of ``matrix`` (n, 30) -> one answer per row."""
        logits = ((matrix - self.mean) / self.scale) @ self.coef + self.intercept
        # sigmoid(z) = exp(-log(1 + exp(-z))), without overflow for large |z|
        probabilities = np.exp(-np.logaddexp(0.0, -logits))
        return [
            {
                "probability_malignant": float(p),
                "label": "malignant" if p >= THRESHOLD else "benign",
            }
            for p in probabilities
        ]


def _array(weights: Mapping[str, Any], name: str) -> npt.NDArray[Any]:
    try:
        array: npt.NDArray[Any] = weights[name]
    except KeyError:
        raise ValueError(f"weights.npz has no array {name!r}; re-run train.py") from None
    return array


def _vector(weights: Mapping[str, Any], name: str) -> FloatArray:
    array = np.asarray(_array(weights, name), dtype=np.float64)
    if array.shape != (N_FEATURES,):
        raise ValueError(
            f"weights.npz: {name} must have shape ({N_FEATURES},), got {list(array.shape)}"
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(f"weights.npz: {name} holds non-finite values")
    return array


def _measurements(features: Mapping[str, Any]) -> FloatArray:
    """The 30 measurements of one request as a float64 vector."""
    if not isinstance(features, Mapping) or "measurements" not in features:
        raise ValueError('expected {"measurements": [30 numbers]}')
    values = np.asarray(features["measurements"], dtype=np.float64)
    if values.shape == (1, N_FEATURES):
        values = values[0]
    if values.shape != (N_FEATURES,):
        raise ValueError(
            f"measurements must hold {N_FEATURES} numbers (shape ({N_FEATURES},) or "
            f"(1, {N_FEATURES})), got shape {list(values.shape)}"
        )
    if not np.all(np.isfinite(values)):
        raise ValueError("measurements must be finite numbers")
    return values
