"""Tabular models with no user code: ``runtime: sklearn``, ``xgboost`` and ``lightgbm``.

Each loads its framework's own safe format (skops, XGBoost JSON/UBJSON, LightGBM text),
takes features by name, as a row, as rows or as v2 tensors, and answers ``predict`` and,
for classifiers, ``predict_proba``; a batch of requests is one call of the estimator.
Frameworks are imported in ``load()``, in each worker after fork.
"""

from servinglib.runtimes.tabular._artifacts import ARTIFACTS, artifact_refusal
from servinglib.runtimes.tabular._features import FeatureLayout, Rows
from servinglib.runtimes.tabular.schema import input_schema

__all__ = ["ARTIFACTS", "FeatureLayout", "Rows", "artifact_refusal", "input_schema"]
