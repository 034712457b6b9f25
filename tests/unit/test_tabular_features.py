"""Requests of every form to one matrix of rows (servinglib.runtimes.tabular._features)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from servinglib.errors import InvalidInputError, ModelLoadError
from servinglib.model import TensorSpec
from servinglib.runtimes.tabular import FeatureLayout, input_schema
from servinglib.runtimes.tabular._features import layout_from

NUMERIC = FeatureLayout("m", ("a", "b", "c"))
MIXED = FeatureLayout("m", ("a", "color"), categorical=frozenset({"color"}), tensor=None)
TREES = FeatureLayout("m", ("a", "b", "c"), datatype="FP32", nullable=True)


def test_one_row_by_name_as_a_list_and_rows_give_the_same_matrix() -> None:
    by_name = NUMERIC.rows({"c": 3, "a": 1.5, "b": -2})
    assert by_name.form == "one"
    np.testing.assert_array_equal(by_name.matrix, [[1.5, -2.0, 3.0]])
    as_list = NUMERIC.rows([1.5, -2, 3])
    np.testing.assert_array_equal(as_list.matrix, by_name.matrix)
    rows = NUMERIC.rows({"rows": [{"a": 1.5, "b": -2, "c": 3}, [0, 0, 1]]})
    assert rows.form == "rows"
    np.testing.assert_array_equal(rows.matrix, [[1.5, -2, 3], [0, 0, 1]])


def test_tensors_as_a_matrix_or_columns() -> None:
    matrix = np.arange(6, dtype=np.float64).reshape(2, 3)
    rows = NUMERIC.rows({"input": matrix})
    assert rows.form == "tensors"
    assert rows.matrix is matrix  # nothing copied
    columns = MIXED.rows({"a": np.array([1.0, 2.0]), "color": np.array([b"red", b"blue"], object)})
    assert columns.matrix.tolist() == [[1.0, "red"], [2.0, "blue"]]


BAD: list[tuple[FeatureLayout, Any, str]] = [
    (NUMERIC, {"a": 1, "b": 2}, "missing ['c']"),
    (NUMERIC, {"a": 1, "b": 2, "c": 3, "d": 4}, "unknown ['d']"),
    (NUMERIC, {"a": 1, "b": "2", "c": 3}, "features.b of model 'm' must be a number; got '2'"),
    (NUMERIC, [1, 2], "holds the 3 features"),
    (NUMERIC, [1, None, 3], "features.b of model 'm' must be a number"),
    (NUMERIC, [True, 1, 2], "must be a number"),
    (NUMERIC, [10**400, 1, 2], "too large for a float64"),
    (NUMERIC, {"rows": []}, "non-empty list"),
    (NUMERIC, {"rows": [[1, 2, 3], "x"]}, "features.rows[1]: model 'm' takes an object"),
    (NUMERIC, "abc", "takes an object of features by name"),
    (NUMERIC, {"input": np.zeros((2, 4))}, "expected [rows >= 1, 3]"),
    (NUMERIC, {"input": np.zeros((0, 3))}, "expected [rows >= 1, 3]"),
    (NUMERIC, {"input": np.array([[1.0, np.nan, 2.0]])}, "NaN or Infinity at flat position 1"),
    (TREES, {"input": np.array([[1.0, np.inf, 2.0]], np.float32)}, "Infinity at flat position 1"),
    (MIXED, {"a": 1.0, "color": 3}, "features.color of model 'm' must be a string"),
    (MIXED, {"a": np.array([1.0]), "color": np.array([1.0])}, "categorical: send it as BYTES"),
    (MIXED, {"a": np.array([1.0, 2.0]), "color": np.array([b"x"], object)}, "same number of rows"),
    (MIXED, {"a": np.zeros((2, 2)), "color": np.array([b"x"], object)}, "a feature is a column"),
]


@pytest.mark.parametrize(("layout", "features", "message"), BAD)
def test_bad_requests_are_refused_naming_the_problem(
    layout: FeatureLayout, features: Any, message: str
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        layout.rows(features)
    assert message in str(refused.value)


def test_null_and_nan_are_missing_values_for_trees() -> None:
    rows = TREES.rows({"rows": [[1, None, 2]]})
    assert np.isnan(rows.matrix[0, 1])
    tensor = np.array([[1.0, np.nan, 2.0]], np.float32)
    assert TREES.rows({"input": tensor}).matrix is tensor


def test_layouts_from_fitted_names_or_declared_inputs() -> None:
    fitted = layout_from("m", ["x", "y"], 2, (), datatype="FP64", nullable=False)
    assert fitted.specs() == (TensorSpec("input", "FP64", (-1, 2)),)
    unnamed = layout_from("m", None, 3, (), datatype="FP32", nullable=True)
    assert unnamed.names == ("f0", "f1", "f2")
    columns = (TensorSpec("y", "FP64", (-1,)), TensorSpec("x", "BYTES", (-1,)))
    declared = layout_from("m", ["x", "y"], 2, columns, datatype="FP64", nullable=False)
    assert declared.names == ("x", "y")  # the fitted order, whatever the declared order
    assert declared.categorical == {"x"}
    matrix = layout_from(
        "m", None, 2, (TensorSpec("X", "FP32", (-1, 2)),), datatype="FP64", nullable=False
    )
    assert matrix.tensor == "X"
    with pytest.raises(ModelLoadError, match="fitted on"):
        layout_from(
            "m", ["x", "y"], 2, (TensorSpec("z", "FP64", (-1,)),), datatype="FP64", nullable=False
        )


def test_the_input_schema_takes_every_form_and_names_bad_features() -> None:
    validator = jsonschema.Draft202012Validator(input_schema(MIXED))
    for good in (
        {"a": 1.0, "color": "red"},
        [1.0, "red"],
        {"rows": [[1, "red"], {"a": 2, "color": "x"}]},
    ):
        assert not list(validator.iter_errors(good))
    for bad in ({"a": 1.0}, {"a": "1", "color": "red"}, [1.0], {"rows": []}, {"a": 1, "color": 2}):
        assert list(validator.iter_errors(bad))


def test_forests_load_without_listing_sklearns_own_tree_class(tmp_path: Path) -> None:
    import skops.io
    from sklearn.datasets import load_iris
    from sklearn.ensemble import RandomForestClassifier

    from servinglib.model import ModelSettings
    from servinglib.runtimes.tabular.sklearn import SklearnModel

    iris = load_iris(as_frame=True)
    labels = np.asarray(iris.target_names)[iris.target]
    forest = RandomForestClassifier(n_estimators=5, n_jobs=4, random_state=0)
    forest.fit(iris.data, labels)
    assert skops.io.get_untrusted_types(data=skops.io.dumps(forest)) == ["sklearn.tree._tree.Tree"]
    skops.io.dump(forest, tmp_path / "model.skops")
    served = SklearnModel()
    served.configure(ModelSettings("iris", "1"))
    served.load(tmp_path)
    assert served.estimator.n_jobs == 1  # batches and workers use the cores, not joblib
    answer = served.predict(iris.data.iloc[0].to_dict())
    assert answer["predict"] == forest.predict(iris.data.iloc[[0]])[0] == "setosa"
    assert set(answer["predict_proba"]) == {"setosa", "versicolor", "virginica"}
    tensors = served.predict({"input": iris.data.to_numpy()[:3]})
    assert tensors["predict"].tolist() == forest.predict(iris.data.iloc[:3]).tolist()
    assert [spec.datatype for spec in served.outputs] == ["BYTES", "FP64"]
