"""``runtime: xgboost``: serve ``<version>/model.json`` or ``model.ubj``, no pickle.

The booster is loaded from XGBoost's own formats (``Booster.save_model`` or
``XGBClassifier.save_model``) and answers with ``inplace_predict`` on the batch's rows.
``binary:logistic`` and ``multi:softprob`` models answer ``predict`` (the class, as
``XGBClassifier.predict``) and ``predict_proba``; other objectives answer ``predict``.
A missing value is ``null`` in ``/infer`` and NaN in tensors, as in training.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.errors import ModelLoadError
from servinglib.runtimes.tabular._artifacts import find_artifact
from servinglib.runtimes.tabular._base import PREDICT, PREDICT_PROBA, TabularModel

__all__ = ["XGBoostModel"]

_PROBABILITIES = ("binary:logistic", "multi:softprob")


def _import_xgboost() -> Any:
    try:
        import xgboost
    except ImportError as e:
        raise ModelLoadError(
            "runtime: xgboost needs XGBoost; install it with pip install 'servinglib[xgboost]'"
        ) from e
    return xgboost


class XGBoostModel(TabularModel):
    """Serves an XGBoost booster from its JSON or UBJSON model file."""

    platform = "xgboost"

    def load(self, path: Path) -> None:
        """Load the booster and read its objective, classes and feature names."""
        xgb = _import_xgboost()
        artifact = find_artifact("xgboost", path, self.settings.runtime_options)
        try:
            self.booster = xgb.Booster(model_file=str(artifact))
        except Exception as e:  # XGBoostError, or the OS's on an unreadable file
            raise ModelLoadError(f"XGBoost cannot load {artifact}: {e}") from e
        self.booster.set_param({"nthread": self.threads()})
        learner = json.loads(self.booster.save_config())["learner"]
        self.objective = str(learner["objective"]["name"])
        count = int(self.booster.num_features())
        classes: list[Any] | None = None
        if self.objective == "binary:logistic":
            classes = [0, 1]
        elif self.objective == "multi:softprob":
            classes = list(range(int(learner["learner_model_param"]["num_class"])))
        self._describe(
            self.booster.feature_names,
            count,
            datatype="FP32",
            nullable=True,
            classes=classes,
            predict_datatype="INT64" if classes is not None else "FP32",
            proba_datatype="FP32",
        )
        if self.layout.categorical:
            raise ModelLoadError(
                f"runtime: xgboost takes numeric features; model {self.settings.name!r} "
                f"declares {sorted(self.layout.categorical)} as BYTES: send category codes"
            )

    def _run(self, matrix: np.ndarray, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        raw = self.booster.inplace_predict(matrix, validate_features=False)
        if self.objective not in _PROBABILITIES:
            return {PREDICT: raw}
        proba = np.column_stack((1 - raw, raw)) if raw.ndim == 1 else raw
        results = {}
        if PREDICT in outputs:
            picked = (raw > 0.5).astype(np.int64) if raw.ndim == 1 else proba.argmax(axis=1)
            results[PREDICT] = self.class_labels[picked]
        if PREDICT_PROBA in outputs:
            results[PREDICT_PROBA] = proba
        return results
