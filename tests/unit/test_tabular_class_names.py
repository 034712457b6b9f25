"""``runtime_options.classes`` names the classes of every tabular runtime the same way:
``predict`` answers the name (a BYTES output) and ``predict_proba`` is keyed by it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from servinglib.model import ModelSettings
from tests.tabular_models import cancer_frame, write_sklearn_pipeline

pytest.importorskip("skops")

NAMES = ["benign", "malignant"]


def _load(version: Path, **options: object) -> object:
    from servinglib.runtimes.tabular.sklearn import SklearnModel

    model = SklearnModel()
    model.configure(ModelSettings("cancer", "1", runtime_options=options))
    model.load(version)
    return model


def test_sklearn_answers_the_given_class_names_in_every_request_form(tmp_path: Path) -> None:
    fitted = write_sklearn_pipeline(tmp_path / "cancer/1")
    model = _load(tmp_path / "cancer/1", classes=NAMES)
    frame, _ = cancer_frame()
    expected = [NAMES[int(label)] for label in fitted.predict(frame)]

    specs = {spec.name: spec for spec in model.outputs}  # type: ignore[attr-defined]
    assert specs["predict"].datatype == "BYTES"
    one = model.predict(frame.iloc[0].to_dict())  # type: ignore[attr-defined]
    assert one["predict"] == expected[0]
    assert set(one["predict_proba"]) == set(NAMES)
    tensors = model.predict({"input": frame.to_numpy()})  # type: ignore[attr-defined]
    assert tensors["predict"].tolist() == expected
    assert {"benign", "malignant"} == set(expected)  # both classes were checked


def test_sklearn_without_names_keeps_the_estimator_labels(tmp_path: Path) -> None:
    fitted = write_sklearn_pipeline(tmp_path / "cancer/1")
    model = _load(tmp_path / "cancer/1")
    frame, _ = cancer_frame()
    answer = model.predict({"input": frame.to_numpy()[:20]})  # type: ignore[attr-defined]
    np.testing.assert_array_equal(answer["predict"], fitted.predict(frame.iloc[:20]))
