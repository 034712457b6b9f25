"""The tabular example: prepare.py builds both models, which validate and self-test."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from servinglib.checks import run_selftest_suite, validate_service
from servinglib.config.spec import load_config
from servinglib.model import ModelSettings
from servinglib.runtimes.tabular.xgboost import XGBoostModel
from servinglib.testing import import_file

EXAMPLE = Path(__file__).resolve().parent.parent
CONFIG = EXAMPLE / "servinglib.yaml"

prepare = import_file(EXAMPLE / "prepare.py")


def test_prepare_builds_models_that_validate_and_self_test() -> None:
    assert prepare.main([]) == 0
    _, problems = validate_service(CONFIG)
    assert problems == []
    run = run_selftest_suite(load_config(CONFIG))
    assert run.passed, [(r.model, r.version, r.reason) for r in run.records]


def test_the_xgboost_model_answers_as_xgboost_on_the_held_out_patients() -> None:
    import xgboost

    assert prepare.main([]) == 0
    features, _ = prepare.diabetes(categorical=False)
    _, held_out, _, _ = prepare.split(features, np.zeros(len(features)))
    version = EXAMPLE / "models" / "diabetes_xgb" / "1"
    served = XGBoostModel()
    served.configure(ModelSettings("diabetes-xgb", "1"))
    served.load(version)
    booster = xgboost.Booster(model_file=str(version / "model.json"))
    expected = booster.inplace_predict(held_out.to_numpy())
    answer = served.predict({"rows": held_out.to_numpy().tolist()})
    np.testing.assert_allclose(answer["predict"], expected, rtol=1e-6)
    request = json.loads((EXAMPLE / "request.json").read_text())
    assert set(request["features"]) == set(features.columns)
