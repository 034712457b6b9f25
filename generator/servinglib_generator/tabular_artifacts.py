"""Starter artifacts of the tabular runtimes (``sklearn``, ``xgboost``, ``lightgbm``).

Each is a one-split model on two features, ``x1`` and ``x2``, fitted at generation time on
``y = 1 + 2·x1`` (``x1`` in {0, 1}, ``x2`` noise it must ignore): it answers ``predict`` 1.0
for ``x1 = 0`` and 3.0 for ``x1 = 1``, whatever ``x2``, so the self-tests of
``test_data.json`` hold for all three. Saved in each framework's own format, no pickle:
``model.skops`` (a ``StandardScaler`` + ``DecisionTreeRegressor`` pipeline), XGBoost's
``model.json``, LightGBM's ``model.txt``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from servinglib_generator.errors import ArtifactError

__all__ = ["TABULAR_ARTIFACTS", "build_tabular_model"]

# runtime -> (artifact file, the packages that build it, the extra that installs them)
TABULAR_ARTIFACTS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "sklearn": ("model.skops", ("sklearn", "skops", "pandas"), "sklearn"),
    "xgboost": ("model.json", ("xgboost", "pandas"), "xgboost"),
    "lightgbm": ("model.txt", ("lightgbm", "pandas"), "lightgbm"),
}


def build_tabular_model(runtime: str, version_dir: Path) -> Path:
    """Fit the starter model of ``runtime`` and save it into ``version_dir``.

    Raises:
        ArtifactError: the framework (or pandas, skops) is not installed.
    """
    artifact, packages, extra = TABULAR_ARTIFACTS[runtime]
    try:
        pd = importlib.import_module("pandas")
        modules = {name: importlib.import_module(name) for name in packages}
    except ImportError as e:
        raise ArtifactError(
            f"runtime={runtime} builds a starter {artifact} with {', '.join(packages)}; "
            f"{e.name} is not installed: pip install 'servinglib[{extra}]'"
        ) from e
    features = pd.DataFrame({"x1": [0.0, 1.0] * 8, "x2": [float(i // 2 % 4) for i in range(16)]})
    target = 1.0 + 2.0 * features["x1"].to_numpy()
    path = version_dir / artifact
    if runtime == "sklearn":
        _sklearn(features, target, path)
    elif runtime == "xgboost":
        model: Any = modules["xgboost"].XGBRegressor(
            n_estimators=1,
            max_depth=1,
            learning_rate=1.0,
            reg_lambda=0.0,
            base_score=0.0,
            min_child_weight=0.0,
            n_jobs=1,
        )
        model.fit(features, target)
        model.save_model(path)
    else:
        model = modules["lightgbm"].LGBMRegressor(
            n_estimators=1,
            learning_rate=1.0,
            num_leaves=2,
            min_child_samples=1,
            min_data_in_bin=1,
            min_sum_hessian_in_leaf=0.0,
            reg_lambda=0.0,
            boost_from_average=False,
            verbose=-1,
            n_jobs=1,
        )
        model.fit(features, target)
        model.booster_.save_model(path)
    return path


def _sklearn(features: Any, target: Any, path: Path) -> None:
    skops_io = importlib.import_module("skops.io")
    pipeline = importlib.import_module("sklearn.pipeline")
    preprocessing = importlib.import_module("sklearn.preprocessing")
    tree = importlib.import_module("sklearn.tree")
    model = pipeline.make_pipeline(
        preprocessing.StandardScaler(), tree.DecisionTreeRegressor(max_depth=1, random_state=0)
    )
    model.fit(features, target)
    skops_io.dump(model, path)
