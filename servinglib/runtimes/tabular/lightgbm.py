"""``runtime: lightgbm``: serve ``<version>/model.txt`` (LightGBM's text format), no pickle.

``binary`` and ``multiclass`` models answer ``predict`` (the class index, as
``LGBMClassifier.predict`` with its default labels) and ``predict_proba``; other
objectives answer ``predict``. A missing value is ``null`` in ``/infer`` and NaN in tensors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from servinglib.errors import ModelLoadError
from servinglib.runtimes.tabular._artifacts import find_artifact
from servinglib.runtimes.tabular._base import PREDICT, PREDICT_PROBA, TabularModel

__all__ = ["LightGBMModel"]

_CLASSIFIERS = ("binary", "multiclass", "softmax", "multiclassova", "multiclass_ova", "ova")


def _import_lightgbm() -> Any:
    try:
        import lightgbm
    except ImportError as e:
        raise ModelLoadError(
            "runtime: lightgbm needs LightGBM; install it with pip install 'servinglib[lightgbm]'"
        ) from e
    return lightgbm


def _objective(artifact: Path) -> str:
    """The objective on the header line ``objective=binary sigmoid:1`` of a model file."""
    with artifact.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if line.startswith("objective="):
                return line.removeprefix("objective=").split()[0]
            if line.startswith("Tree="):
                break
    return ""


class LightGBMModel(TabularModel):
    """Serves a LightGBM booster from its text model file."""

    platform = "lightgbm"

    def load(self, path: Path) -> None:
        """Load the booster and read its objective, classes and feature names."""
        lgb = _import_lightgbm()
        artifact = find_artifact("lightgbm", path, self.settings.runtime_options)
        try:
            self.booster = lgb.Booster(model_file=str(artifact))
        except Exception as e:  # LightGBMError, or the OS's on an unreadable file
            raise ModelLoadError(f"LightGBM cannot load {artifact}: {e}") from e
        self.objective = _objective(artifact)
        self._threads = self.threads()
        classes: list[Any] | None = None
        if self.objective in _CLASSIFIERS:
            per_iteration = int(self.booster.num_model_per_iteration())
            classes = list(range(2 if self.objective == "binary" else per_iteration))
        self._describe(
            [str(n) for n in self.booster.feature_name()],
            int(self.booster.num_feature()),
            datatype="FP64",
            nullable=True,
            classes=classes,
            predict_datatype="INT64" if classes is not None else "FP64",
        )
        if self.layout.categorical:
            raise ModelLoadError(
                f"runtime: lightgbm takes numeric features; model {self.settings.name!r} "
                f"declares {sorted(self.layout.categorical)} as BYTES: send category codes"
            )

    def _run(self, matrix: np.ndarray, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        raw = np.asarray(self.booster.predict(matrix, num_threads=self._threads))
        if self.objective not in _CLASSIFIERS:
            return {PREDICT: raw}
        proba = np.column_stack((1 - raw, raw)) if raw.ndim == 1 else raw
        results = {}
        if PREDICT in outputs:
            picked = (raw > 0.5).astype(np.int64) if raw.ndim == 1 else proba.argmax(axis=1)
            results[PREDICT] = self.class_labels[picked]
        if PREDICT_PROBA in outputs:
            results[PREDICT_PROBA] = proba
        return results
