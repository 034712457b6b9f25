"""Combines the breast-cancer versions: the mean probability, labelled at the same threshold."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from models.breast_cancer.model import THRESHOLD


def mean_probability(answers: Sequence[dict[str, Any]], weights: Sequence[float]) -> dict[str, Any]:
    """The weighted mean of ``probability_malignant`` and the label it gives."""
    total = sum(weights)
    p = sum(a["probability_malignant"] * w for a, w in zip(answers, weights, strict=True)) / total
    return {"probability_malignant": p, "label": "malignant" if p >= THRESHOLD else "benign"}
