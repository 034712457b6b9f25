"""``servinglib init --runtime sklearn|xgboost|lightgbm``: a tabular model, trained and served.

Writes ``train.py`` (fits a small model on a data set bundled with scikit-learn, no
download), ``servinglib.yaml``, then runs ``train.py`` once: version 1's artifact, its
``test_data.json`` (the model's own answers on two rows) and a ``request.json`` for curl.
Run ``python train.py`` again to retrain.
"""

from __future__ import annotations

import runpy
from pathlib import Path

from servinglib.errors import ServinglibError

__all__ = ["TABULAR_STARTERS", "write_tabular_starter"]

_HEADER = '''\
"""Train the {model} model on scikit-learn's bundled {dataset} data and write version 1.

servinglib serves models/{model}/1/{artifact} with runtime: {runtime}, no model code.
Retrain with: python train.py
"""

import json
from pathlib import Path

'''

_SELF_TESTS = """
# Self-tests: the model's own answers on two rows, checked after every load.
cases = []
for i in (0, 1):
    row = features.iloc[[i]]
    cases.append(
        {{
            "name": f"row {{i}}",
            "input": row.iloc[0].to_dict(),
            "expected": expected(row),
            "tolerance": {{"rtol": 1e-5}},
        }}
    )
(VERSION / "test_data.json").write_text(json.dumps({{"cases": cases}}, indent=1))
request = {{"model_id": "{model}", "features": features.iloc[0].to_dict()}}
(HERE / "request.json").write_text(json.dumps(request, indent=1))
print(f"wrote {{VERSION / '{artifact}'}} and its self-tests")
"""

_BODIES = {
    "sklearn": """\
import skops.io
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

HERE = Path(__file__).resolve().parent
VERSION = HERE / "models" / "cancer" / "1"

features, labels = load_breast_cancer(return_X_y=True, as_frame=True)
model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
model.fit(features, labels)
VERSION.mkdir(parents=True, exist_ok=True)
skops.io.dump(model, VERSION / "model.skops")  # no pickle: servinglib loads it with skops


def expected(row):
    probabilities = model.predict_proba(row)[0].tolist()
    return {
        "predict": int(model.predict(row)[0]),
        "predict_proba": dict(zip([str(c) for c in model.classes_], probabilities)),
    }
""",
    "xgboost": """\
import xgboost
from sklearn.datasets import load_diabetes

HERE = Path(__file__).resolve().parent
VERSION = HERE / "models" / "diabetes" / "1"

features, target = load_diabetes(return_X_y=True, as_frame=True)
model = xgboost.XGBRegressor(n_estimators=100, max_depth=4, learning_rate=0.1)
model.fit(features, target)
VERSION.mkdir(parents=True, exist_ok=True)
model.save_model(VERSION / "model.json")  # XGBoost's own format, with the feature names


def expected(row):
    return {"predict": float(model.predict(row)[0])}
""",
    "lightgbm": """\
import lightgbm
from sklearn.datasets import load_breast_cancer

HERE = Path(__file__).resolve().parent
VERSION = HERE / "models" / "cancer" / "1"

features, labels = load_breast_cancer(return_X_y=True, as_frame=True)
# LightGBM writes feature names without spaces: use those names from the start.
features = features.rename(columns=lambda name: name.replace(" ", "_"))
model = lightgbm.LGBMClassifier(n_estimators=100, num_leaves=15, verbose=-1)
model.fit(features, labels)
VERSION.mkdir(parents=True, exist_ok=True)
model.booster_.save_model(VERSION / "model.txt")  # LightGBM's own text format


def expected(row):
    probabilities = model.predict_proba(row)[0].tolist()
    return {
        "predict": int(model.predict(row)[0]),
        "predict_proba": {"0": probabilities[0], "1": probabilities[1]},
    }
""",
}

# runtime -> (model name, data set, artifact, extra)
TABULAR_STARTERS: dict[str, tuple[str, str, str, str]] = {
    "sklearn": ("cancer", "breast-cancer", "model.skops", "sklearn"),
    "xgboost": ("diabetes", "diabetes", "model.json", "xgboost"),
    "lightgbm": ("cancer", "breast-cancer", "model.txt", "lightgbm"),
}

_CONFIG = """\
service: {model}-service
models:
  - name: {model}
    runtime: {runtime}             # no model code: servinglib loads models/{model}/1/{artifact}
    repository: models/{model}     # holds 1/, 2/, ... each with its artifact + test_data.json
    default_version: "1"
    # batched by default: concurrent requests share one predict call (see batching:)
"""


def train_script(runtime: str) -> str:
    """The ``train.py`` that ``servinglib init --runtime RUNTIME`` writes."""
    model, dataset, artifact, _ = TABULAR_STARTERS[runtime]
    fields = {"model": model, "dataset": dataset, "artifact": artifact, "runtime": runtime}
    return _HEADER.format(**fields) + _BODIES[runtime] + _SELF_TESTS.format(**fields)


def write_tabular_starter(directory: Path, runtime: str, *, force: bool = False) -> list[Path]:
    """Write ``train.py`` and ``servinglib.yaml`` into ``directory`` and train version 1.

    Returns:
        The files written (train.py, servinglib.yaml, the artifact, test_data.json,
        request.json).

    Raises:
        ServinglibError: a file exists already and ``force`` is false, or the framework
            is not installed.
    """
    model, _, artifact, extra = TABULAR_STARTERS[runtime]
    version = directory / "models" / model / "1"
    targets = {
        directory / "train.py": train_script(runtime),
        directory / "servinglib.yaml": _CONFIG.format(
            model=model, runtime=runtime, artifact=artifact
        ),
    }
    outputs = [version / artifact, version / "test_data.json", directory / "request.json"]
    existing = [path for path in [*targets, *outputs] if path.exists()]
    if existing and not force:
        names = ", ".join(str(path) for path in existing)
        raise ServinglibError(
            f"servinglib init would overwrite {names}; run it in an empty directory, or pass "
            "--force to replace them"
        )
    for path, text in targets.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    try:
        runpy.run_path(str(directory / "train.py"), run_name="__main__")
    except ImportError as e:
        raise ServinglibError(
            f"train.py needs {e.name}: install it with pip install 'servinglib[{extra}]', then "
            f"run python {directory / 'train.py'}"
        ) from e
    return [*targets, *outputs]
