"""Tiny tabular models on scikit-learn's bundled data sets, written as version directories.

Each builder fits in well under a second and writes the artifact plus a ``test_data.json``
whose expected outputs are the library's own predictions, so a version self-tests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

__all__ = [
    "CUSTOM_STEP",
    "cancer_frame",
    "diabetes_frame",
    "write_lightgbm",
    "write_sklearn_categorical",
    "write_sklearn_custom",
    "write_sklearn_pipeline",
    "write_test_data",
    "write_xgboost",
]

CUSTOM_STEP = "custom_steps.Doubler"  # the untrusted type of write_sklearn_custom

_CUSTOM_STEPS = """\
from sklearn.base import BaseEstimator, TransformerMixin


class Doubler(TransformerMixin, BaseEstimator):
    def fit(self, frame, target=None):
        return self

    def transform(self, frame):
        return frame * 2.0
"""


def cancer_frame() -> tuple[pd.DataFrame, np.ndarray]:
    """Breast-cancer features (30 named columns) and labels."""
    frame, target = load_breast_cancer(return_X_y=True, as_frame=True)
    return frame, target.to_numpy()


def diabetes_frame(categorical: bool = False) -> tuple[pd.DataFrame, np.ndarray]:
    """Diabetes features (10 named columns; ``sex`` as "f"/"m" when categorical) and target."""
    frame, target = load_diabetes(return_X_y=True, as_frame=True)
    if categorical:
        frame = frame.assign(sex=np.where(frame["sex"] > 0, "m", "f").astype(object))
    return frame, target.to_numpy()


def write_test_data(version_dir: Path, cases: list[tuple[str, Any, Any]]) -> None:
    """A test_data.json of ``(name, input, expected)`` cases, compared within 1e-6."""
    payload = {
        "cases": [
            {"name": name, "input": given, "expected": expected, "tolerance": {"rtol": 1e-6}}
            for name, given, expected in cases
        ]
    }
    (version_dir / "test_data.json").write_text(json.dumps(payload, indent=1))


def _floats(answer: dict[str, Any]) -> dict[str, Any]:
    """Expected outputs with every number a float where the runtime answers floats."""
    return json.loads(json.dumps(answer))


def write_sklearn_pipeline(version_dir: Path) -> Pipeline:
    """StandardScaler + LogisticRegression on breast cancer, saved as model.skops."""
    import skops.io

    frame, target = cancer_frame()
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=200)).fit(frame, target)
    version_dir.mkdir(parents=True, exist_ok=True)
    skops.io.dump(model, version_dir / "model.skops")
    row = frame.iloc[[0]]
    proba = model.predict_proba(row)[0].tolist()
    expected = {
        "predict": int(model.predict(row)[0]),
        "predict_proba": {"0": proba[0], "1": proba[1]},
    }
    write_test_data(version_dir, [("first patient", frame.iloc[0].to_dict(), _floats(expected))])
    return model


def write_sklearn_categorical(version_dir: Path) -> Pipeline:
    """One-hot ``sex`` (a string) + Ridge on diabetes: a Pipeline with a ColumnTransformer."""
    import skops.io

    frame, target = diabetes_frame(categorical=True)
    numeric = [c for c in frame.columns if c != "sex"]
    model = Pipeline(
        [
            (
                "columns",
                ColumnTransformer(
                    [("sex", OneHotEncoder(), ["sex"]), ("scale", StandardScaler(), numeric)]
                ),
            ),
            ("ridge", Ridge(alpha=1.0)),
        ]
    ).fit(frame, target)
    version_dir.mkdir(parents=True, exist_ok=True)
    skops.io.dump(model, version_dir / "model.skops")
    expected = {"predict": float(model.predict(frame.iloc[[0]])[0])}
    write_test_data(version_dir, [("first patient", frame.iloc[0].to_dict(), expected)])
    return model


def write_sklearn_custom(version_dir: Path, module_dir: Path) -> Pipeline:
    """A Pipeline with a custom transformer (``custom_steps.Doubler``) that skops does not
    trust by default; the module is written to ``module_dir``."""
    import skops.io

    module_dir.mkdir(parents=True, exist_ok=True)
    (module_dir / "custom_steps.py").write_text(_CUSTOM_STEPS)
    sys.path.insert(0, str(module_dir))
    try:
        from custom_steps import Doubler  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(module_dir))
    frame, target = diabetes_frame()
    model = make_pipeline(Doubler(), Ridge()).fit(frame, target)
    version_dir.mkdir(parents=True, exist_ok=True)
    skops.io.dump(model, version_dir / "model.skops")
    expected = {"predict": float(model.predict(frame.iloc[[0]])[0])}
    write_test_data(version_dir, [("first patient", frame.iloc[0].to_dict(), expected)])
    return model


def write_xgboost(version_dir: Path, suffix: str = "json") -> Any:
    """A 20-tree XGBRegressor on diabetes, saved as model.json (or model.ubj)."""
    import xgboost

    frame, target = diabetes_frame()
    model = xgboost.XGBRegressor(n_estimators=20, max_depth=3, n_jobs=1).fit(frame, target)
    version_dir.mkdir(parents=True, exist_ok=True)
    model.save_model(version_dir / f"model.{suffix}")
    expected = {"predict": float(model.predict(frame.iloc[[0]])[0])}
    write_test_data(version_dir, [("first patient", frame.iloc[0].to_dict(), expected)])
    return model


def write_lightgbm(version_dir: Path) -> Any:
    """A 20-tree LGBMClassifier on breast cancer, saved as model.txt."""
    import lightgbm

    frame, target = cancer_frame()
    frame = frame.rename(columns=lambda c: c.replace(" ", "_"))  # LightGBM's own feature names
    model = lightgbm.LGBMClassifier(n_estimators=20, num_leaves=7, verbose=-1, n_jobs=1)
    model.fit(frame, target)
    version_dir.mkdir(parents=True, exist_ok=True)
    model.booster_.save_model(version_dir / "model.txt")
    proba = model.predict_proba(frame.iloc[[0]])[0].tolist()
    expected = {
        "predict": int(model.predict(frame.iloc[[0]])[0]),
        "predict_proba": {"0": proba[0], "1": proba[1]},
    }
    write_test_data(version_dir, [("first patient", frame.iloc[0].to_dict(), expected)])
    return model


def pickle_estimator(version_dir: Path) -> str:
    """A joblib dump of a fitted Ridge (pickle) and its sha256."""
    import hashlib

    import joblib

    frame, target = diabetes_frame()
    model = Ridge().fit(frame, target)
    version_dir.mkdir(parents=True, exist_ok=True)
    joblib.dump(model, version_dir / "model.joblib")
    expected = {"predict": float(model.predict(frame.iloc[[0]])[0])}
    write_test_data(version_dir, [("first patient", frame.iloc[0].to_dict(), expected)])
    return hashlib.sha256((version_dir / "model.joblib").read_bytes()).hexdigest()
