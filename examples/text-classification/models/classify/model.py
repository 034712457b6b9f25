"""The ticket classifier: a logistic regression over MiniLM sentence embeddings.

``<version>/weights.npz`` (written by ``prepare.py``, not committed) holds ``classes``
(the labels, in the order of the rows of ``coef``), ``coef`` [classes, 384] and
``intercept`` [classes]. A request is ``{"embedding": [384 floats]}`` (or a [1, 384]
tensor, as the embedding step of the pipeline answers); the answer is
``{"label": "billing", "confidence": 0.93}``, the most probable class and its probability.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import servinglib
from servinglib import InvalidInputError, TensorSpec

__all__ = ["DIMENSIONS", "TicketClassifier"]

DIMENSIONS = 384


class TicketClassifier(servinglib.Model):
    """Answers ``{"embedding": [384 floats]}`` with ``{"label", "confidence"}``."""

    inputs = (TensorSpec("embedding", "FP32", (1, DIMENSIONS)),)
    outputs = (TensorSpec("label", "BYTES", (1,)), TensorSpec("confidence", "FP32", (1,)))

    def load(self, path: Path) -> None:
        """Read the trained weights."""
        with np.load(path / "weights.npz") as weights:
            self.classes = [str(label) for label in weights["classes"]]
            self.coef = weights["coef"].astype(np.float32)
            self.intercept = weights["intercept"].astype(np.float32)

    def predict(self, features: Any) -> dict[str, Any]:
        """Classify one embedding."""
        return self.predict_batch([features])[0]

    def predict_batch(self, batch: Sequence[Any]) -> list[dict[str, Any]]:
        """One matrix product for the whole batch."""
        if not batch:
            return []
        logits = np.stack([_embedding(features) for features in batch]) @ self.coef.T
        logits += self.intercept
        logits -= logits.max(axis=1, keepdims=True)
        probabilities = np.exp(logits)
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        best = probabilities.argmax(axis=1)
        # np.float32, not float: Open Inference answers carry the declared FP32
        return [
            {"label": self.classes[i], "confidence": row[i]}
            for i, row in zip(best, probabilities, strict=True)
        ]


def _embedding(features: Any) -> npt.NDArray[np.float32]:
    """The one embedding of a request: 384 numbers, flat or as a [1, 384] tensor."""
    if not isinstance(features, dict) or "embedding" not in features:
        raise InvalidInputError('expected {"embedding": [384 numbers]}', field="embedding")
    try:
        vector = np.asarray(features["embedding"], dtype=np.float32).reshape(-1)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"embedding must be numbers: {e}", field="embedding") from e
    if vector.shape != (DIMENSIONS,) or not np.isfinite(vector).all():
        raise InvalidInputError(
            f"embedding must hold {DIMENSIONS} finite numbers (one sentence), got "
            f"{vector.size}; embed one text per request",
            field="embedding",
        )
    return vector
