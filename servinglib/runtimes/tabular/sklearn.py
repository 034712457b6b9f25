"""``runtime: sklearn``: serve a fitted scikit-learn estimator or ``Pipeline``, no user code.

``<version>/model.skops`` is loaded with skops, which rebuilds the estimator without
running pickle: every type outside skops' trusted defaults (scikit-learn estimators, NumPy,
SciPy) and scikit-learn's own model classes skops leaves out (trees, neighbour search trees:
``SKLEARN_TRUSTED``) must be listed in ``runtime_options.trusted_types``, or the version is
refused with their names. ``model.joblib`` / ``model.pkl`` load only with
``allow_pickle: true`` and the file's ``sha256`` pin. Feature names come from
``feature_names_in_`` (a model fitted on a pandas DataFrame gets one again, so column
transformers select by name); ``inputs:`` declares categorical (BYTES) features.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.errors import InvalidInputError, ModelLoadError
from servinglib.model import TensorSpec
from servinglib.runtimes.tabular._artifacts import (
    artifact_refusal,
    find_artifact,
    import_skops,
    untrusted_types,
)
from servinglib.runtimes.tabular._base import PREDICT, PREDICT_PROBA, TabularModel
from servinglib.wire.datatypes import datatype_of

__all__ = ["SklearnModel"]

log = logging.getLogger("servinglib.runtimes")


class SklearnModel(TabularModel):
    """Serves a fitted scikit-learn estimator; ``predict`` and, for classifiers,
    ``predict_proba`` (one column per ``classes_``)."""

    platform = "sklearn"

    def load(self, path: Path) -> None:
        """Load ``model.skops`` (or a pinned pickle with ``allow_pickle``) from ``path``."""
        options = self.settings.runtime_options
        refusal = artifact_refusal(
            "sklearn",
            path,
            self.settings.version,
            options,
            allow_pickle=bool(options.get("allow_pickle")),
            pinned=options.get("sha256_pinned") or (),
        )
        if refusal is not None:
            raise ModelLoadError(refusal)
        artifact = find_artifact("sklearn", path, options)
        self.estimator = _load_estimator(artifact)
        if not callable(getattr(self.estimator, "predict", None)):
            raise ModelLoadError(
                f"{artifact} holds a {type(self.estimator).__name__}, which has no predict(); "
                "save a fitted estimator or Pipeline"
            )
        self._set_jobs()
        names = getattr(self.estimator, "feature_names_in_", None)
        count = getattr(self.estimator, "n_features_in_", None)
        if count is None:
            count = _declared_count(self.settings.inputs)
        if count is None:
            raise ModelLoadError(
                f"{artifact}: the {type(self.estimator).__name__} does not say how many "
                "features it takes (no n_features_in_: a custom first step that does not "
                f"set it?); declare them under inputs: of model {self.settings.name!r}"
            )
        proba = callable(getattr(self.estimator, "predict_proba", None))
        classes = getattr(self.estimator, "classes_", None) if proba else None
        self._describe(
            [str(n) for n in names] if names is not None else None,
            int(count),
            datatype="FP64",
            nullable=False,
            classes=list(classes) if classes is not None else None,
            predict_datatype=datatype_of(np.asarray(classes)) if classes is not None else "FP64",
        )
        named = names is not None or self.layout.tensor is None  # fitted or declared names
        self._frame = _frame_maker(self) if named else None

    def _set_jobs(self) -> None:
        """One thread per call unless ``intra_op_threads`` says more: batches and workers
        already keep the cores busy, and joblib's pool costs more than a small batch."""
        jobs = int(self.settings.runtime_options.get("intra_op_threads") or 1)
        params = self.estimator.get_params() if hasattr(self.estimator, "get_params") else {}
        wanted = {key: jobs for key in params if key.split("__")[-1] == "n_jobs"}
        if wanted:
            self.estimator.set_params(**wanted)

    def _run(self, matrix: np.ndarray, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        try:
            return self._estimate(matrix, outputs)
        except ValueError as e:  # what scikit-learn raises on rows it cannot take
            raise InvalidInputError(
                f"model {self.settings.name!r} cannot answer these rows: {e}"
            ) from e

    def _estimate(self, matrix: np.ndarray, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        rows = self._frame(matrix) if self._frame is not None else matrix
        results = {}
        if PREDICT in outputs:
            predicted = np.asarray(self.estimator.predict(rows))
            if self.settings.runtime_options.get("classes") is not None:
                predicted = self._renamed(predicted)
            results[PREDICT] = (
                predicted.astype(object) if predicted.dtype.kind == "U" else predicted
            )
        if PREDICT_PROBA in outputs:
            results[PREDICT_PROBA] = np.asarray(self.estimator.predict_proba(rows))
        return results

    def _renamed(self, predicted: np.ndarray) -> np.ndarray:
        """The estimator's labels as ``runtime_options.classes`` names them (same order as
        ``classes_``, the columns of ``predict_proba``)."""
        fitted = np.asarray(self.estimator.classes_)
        index = np.searchsorted(fitted, predicted)  # classes_ is sorted (np.unique)
        named: np.ndarray = self.class_labels[np.clip(index, 0, len(fitted) - 1)]
        return named


def _declared_count(inputs: Sequence[TensorSpec]) -> int | None:
    """The number of features ``inputs:`` declares (a matrix's width, or one per column)."""
    if len(inputs) == 1 and len(inputs[0].shape) == 2 and inputs[0].shape[1] > 0:
        return inputs[0].shape[1]
    return len(inputs) if inputs and all(len(spec.shape) == 1 for spec in inputs) else None


def _load_estimator(artifact: Path) -> Any:
    if artifact.suffix == ".skops":
        skops_io = import_skops()
        # each one is in trusted_types or SKLEARN_TRUSTED (artifact_refusal checked it)
        trusted = untrusted_types(artifact)
        if trusted:
            log.info(
                "loading %s trusting %s beyond skops' defaults (scikit-learn's own model "
                "classes, and runtime_options.trusted_types)",
                artifact,
                trusted,
            )
        try:
            return skops_io.load(artifact, trusted=trusted or None)
        except Exception as e:  # skops raises several types on a damaged archive
            raise ModelLoadError(f"skops cannot load {artifact}: {e}") from e
    import joblib

    log.warning("loading the pickle %s (allow_pickle: true, sha256 pinned)", artifact)
    try:
        return joblib.load(artifact)
    except Exception as e:  # unpickling raises anything the pickled code raises
        raise ModelLoadError(f"joblib cannot load {artifact}: {e}") from e


def _frame_maker(model: SklearnModel) -> Any:
    """Rows -> a pandas DataFrame with the fitted column names (what the estimator checks)."""
    try:
        import pandas as pd
    except ImportError as e:
        raise ModelLoadError(
            f"model {model.settings.name!r} was fitted on named columns (a DataFrame): "
            "serving it needs pandas; install it with pip install 'servinglib[sklearn]'"
        ) from e
    names = list(model.layout.names)
    categorical = model.layout.categorical

    def frame(matrix: np.ndarray) -> Any:
        if matrix.dtype.kind != "O":
            return pd.DataFrame(matrix, columns=names, copy=False)
        return pd.DataFrame(
            {
                name: matrix[:, j] if name in categorical else matrix[:, j].astype(np.float64)
                for j, name in enumerate(names)
            }
        )

    return frame
