"""Train the tabular example's two models on scikit-learn's bundled diabetes data.

Nothing is downloaded and nothing built here is committed. This script writes

- ``models/diabetes_xgb/1/model.json``: a gradient-boosted XGBoost regressor (300 trees,
  depth 2), served with ``runtime: xgboost``;
- ``models/diabetes_pipeline/1/model.skops``: a scikit-learn ``Pipeline`` with its
  preprocessing (``sex`` one-hot encoded from the strings "f"/"m", the other nine features
  standardised) and a ridge regression, served with ``runtime: sklearn``;
- each version's ``test_data.json`` (the model's own answers on three held-out patients),
  and ``request.json`` for curl.

The held-out R² of each model is printed. A stamp records the library versions and the
script's hash, so a second run returns at once; ``--force`` rebuilds.

Usage, from the repository root or this directory::

    python examples/tabular/prepare.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"
STAMP = HERE / ".prepared.json"
SEED = 0
HELD_OUT = 0.2


def diabetes(categorical: bool) -> tuple[pd.DataFrame, np.ndarray]:
    """The ten diabetes features (``sex`` as "f"/"m" when categorical) and the target."""
    from sklearn.datasets import load_diabetes

    features, target = load_diabetes(return_X_y=True, as_frame=True)
    if categorical:
        features = features.assign(sex=np.where(features["sex"] > 0, "m", "f").astype(object))
    return features, target.to_numpy()


def split(features: pd.DataFrame, target: np.ndarray) -> tuple[Any, Any, Any, Any]:
    """A seeded 80/20 split into training and held-out patients."""
    from sklearn.model_selection import train_test_split

    return train_test_split(features, target, test_size=HELD_OUT, random_state=SEED)


def train_xgboost(version_dir: Path) -> float:
    """Fit and save the XGBoost model; returns its held-out R²."""
    import xgboost

    train, held_out, y_train, y_held_out = split(*diabetes(categorical=False))
    model = xgboost.XGBRegressor(
        n_estimators=300,
        max_depth=2,
        learning_rate=0.03,
        subsample=0.8,
        min_child_weight=5,
        random_state=SEED,
    )
    model.fit(train, y_train)
    version_dir.mkdir(parents=True, exist_ok=True)
    model.save_model(version_dir / "model.json")
    write_cases(version_dir, held_out, lambda rows: model.predict(rows).tolist())
    return float(model.score(held_out, y_held_out))


def train_pipeline(version_dir: Path) -> float:
    """Fit and save the scikit-learn Pipeline; returns its held-out R²."""
    import skops.io
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    train, held_out, y_train, y_held_out = split(*diabetes(categorical=True))
    numeric = [name for name in train.columns if name != "sex"]
    columns = ColumnTransformer(
        [("sex", OneHotEncoder(), ["sex"]), ("numeric", StandardScaler(), numeric)]
    )
    model = Pipeline([("columns", columns), ("ridge", Ridge(alpha=1.0))]).fit(train, y_train)
    version_dir.mkdir(parents=True, exist_ok=True)
    skops.io.dump(model, version_dir / "model.skops")
    write_cases(version_dir, held_out, lambda rows: model.predict(rows).tolist())
    return float(model.score(held_out, y_held_out))


def write_cases(version_dir: Path, held_out: pd.DataFrame, predict: Any) -> None:
    """Self-tests: three held-out patients and what the model answers for each."""
    rows = held_out.iloc[:3]
    answers = predict(rows)
    cases = [
        {
            "name": f"held-out patient {index}",
            "input": rows.loc[index].to_dict(),
            "expected": {"predict": float(answer)},
            "tolerance": {"rtol": 1e-5},
        }
        for index, answer in zip(rows.index, answers, strict=True)
    ]
    (version_dir / "test_data.json").write_text(json.dumps({"cases": cases}, indent=1) + "\n")


def stamp() -> dict[str, str]:
    """What the build depends on: this script and the libraries that fit the models."""
    libraries = ("scikit-learn", "skops", "xgboost", "numpy")
    found = {name: version(name) for name in libraries}
    found["prepare.py"] = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    wanted = stamp()
    built = [MODELS / "diabetes_xgb/1/model.json", MODELS / "diabetes_pipeline/1/model.skops"]
    if (
        not args.force
        and STAMP.is_file()
        and json.loads(STAMP.read_text()) == wanted
        and all(path.is_file() for path in built)
    ):
        print("tabular example: up to date")
        return 0
    r2_xgb = train_xgboost(MODELS / "diabetes_xgb" / "1")
    r2_pipeline = train_pipeline(MODELS / "diabetes_pipeline" / "1")
    features, _ = diabetes(categorical=True)
    request = {"model_id": "diabetes-pipeline", "features": features.iloc[0].to_dict()}
    (HERE / "request.json").write_text(json.dumps(request, indent=1) + "\n")
    STAMP.write_text(json.dumps(wanted, indent=1) + "\n")
    print(f"diabetes-xgb: held-out R² {r2_xgb:.3f}; diabetes-pipeline: {r2_pipeline:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
