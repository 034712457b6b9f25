"""``runtime: sklearn`` / ``xgboost`` / ``lightgbm`` under a real ``servinglib serve``.

Tiny models are fitted here on scikit-learn's bundled data; every answer over HTTP is
compared with the library's own ``predict`` / ``predict_proba`` on the same rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest
import requests

from tests.conftest import LiveServer, launch, stop
from tests.tabular_models import (
    cancer_frame,
    diabetes_frame,
    write_lightgbm,
    write_sklearn_categorical,
    write_sklearn_pipeline,
    write_xgboost,
)

pytestmark = pytest.mark.integration

_DIABETES = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]
_ONEHOT_INPUTS = ", ".join(
    f"{{name: {n}, datatype: {'BYTES' if n == 'sex' else 'FP64'}, shape: [-1]}}" for n in _DIABETES
)

CONFIG = f"""\
service: tabular
server: {{workers: 2}}
models:
  - name: cancer
    runtime: sklearn
    repository: models/cancer
    default_version: "1"
  - name: diabetes-onehot
    runtime: sklearn
    repository: models/diabetes_onehot
    default_version: "1"
    inputs: [{_ONEHOT_INPUTS}]
  - name: diabetes-xgb
    runtime: xgboost
    repository: models/diabetes_xgb
    default_version: "1"
  - name: cancer-lgb
    runtime: lightgbm
    repository: models/cancer_lgb
    default_version: "1"
"""


@dataclass
class Served:
    """The server and the fitted models it serves, by model name."""

    server: LiveServer
    models: dict[str, Any]
    frames: dict[str, pd.DataFrame]

    def infer(self, model: str, features: Any) -> requests.Response:
        body = {"model_id": model, "features": features}
        return requests.post(f"{self.server.url}/infer", json=body, timeout=30)

    def v2(self, model: str, body: Any) -> requests.Response:
        return requests.post(f"{self.server.url}/v2/models/{model}/infer", json=body, timeout=30)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("tabular")
    models = {
        "cancer": write_sklearn_pipeline(root / "models/cancer/1"),
        "diabetes-onehot": write_sklearn_categorical(root / "models/diabetes_onehot/1"),
        "diabetes-xgb": write_xgboost(root / "models/diabetes_xgb/1"),
        "cancer-lgb": write_lightgbm(root / "models/cancer_lgb/1"),
    }
    cancer, _ = cancer_frame()
    frames = {
        "cancer": cancer,
        "diabetes-onehot": diabetes_frame(categorical=True)[0],
        "diabetes-xgb": diabetes_frame()[0],
        "cancer-lgb": cancer.rename(columns=lambda c: c.replace(" ", "_")),
    }
    (root / "servinglib.yaml").write_text(CONFIG)
    # importing scikit-learn, skops, XGBoost and LightGBM in each worker takes a while
    server = launch(root / "servinglib.yaml", root, ready_timeout_s=240)
    yield Served(server, models, frames)
    stop(server.process)


def _expected(served: Served, model: str, rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """The library's own answers on ``rows``."""
    estimator = served.models[model]
    answers = {"predict": np.asarray(estimator.predict(rows))}
    if hasattr(estimator, "predict_proba"):
        answers["predict_proba"] = np.asarray(estimator.predict_proba(rows))
    return answers


def _check_rows(served: Served, model: str, output: dict[str, Any], rows: pd.DataFrame) -> None:
    """An /infer answer for ``rows`` (a list per output) equals the library's."""
    expected = _expected(served, model, rows)
    assert set(output) == set(expected)
    np.testing.assert_allclose(output["predict"], expected["predict"], rtol=1e-6)
    if "predict_proba" in expected:
        got = [
            [row[str(c)] for c in range(expected["predict_proba"].shape[1])]
            for row in output["predict_proba"]
        ]
        np.testing.assert_allclose(got, expected["predict_proba"], rtol=1e-6)


MODELS = ["cancer", "diabetes-onehot", "diabetes-xgb", "cancer-lgb"]


@pytest.mark.parametrize("model", MODELS)
def test_infer_one_row_by_name_as_a_list_and_rows(served: Served, model: str) -> None:
    frame = served.frames[model]
    by_name = served.infer(model, frame.iloc[3].to_dict())
    assert by_name.status_code == 200, by_name.text
    answer = by_name.json()["output"]
    _check_rows(served, model, {k: [v] for k, v in answer.items()}, frame.iloc[[3]])
    as_list = served.infer(model, frame.iloc[3].tolist())
    assert as_list.json()["output"] == answer
    rows = [frame.iloc[i].to_dict() for i in range(5, 12)] + [frame.iloc[12].tolist()]
    many = served.infer(model, {"rows": rows})
    assert many.status_code == 200, many.text
    _check_rows(served, model, many.json()["output"], frame.iloc[5:13])


@pytest.mark.parametrize("model", ["cancer", "diabetes-xgb", "cancer-lgb"])
def test_v2_json_matrix(served: Served, model: str) -> None:
    frame = served.frames[model]
    meta = requests.get(f"{served.server.url}/v2/models/{model}", timeout=10).json()
    (tensor,) = meta["inputs"]
    assert tensor["shape"] == [-1, frame.shape[1]]
    rows = frame.iloc[20:27]
    body = {
        "inputs": [
            {
                "name": tensor["name"],
                "datatype": tensor["datatype"],
                "shape": list(rows.shape),
                "data": rows.to_numpy().ravel().tolist(),
            }
        ]
    }
    response = served.v2(model, body)
    assert response.status_code == 200, response.text
    outputs = {o["name"]: o for o in response.json()["outputs"]}
    expected = _expected(served, model, rows)
    assert set(outputs) == set(expected)
    for name, want in expected.items():
        assert outputs[name]["shape"] == list(want.shape)
        got = np.asarray(outputs[name]["data"], dtype=np.float64).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_tritonclient_binary_matrix_and_categorical_columns(served: Served) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url=served.server.url.removeprefix("http://"))
    try:
        for model in ("cancer", "diabetes-xgb", "cancer-lgb"):
            rows = served.frames[model].iloc[30:46]
            meta = client.get_model_metadata(model)
            (tensor,) = meta["inputs"]
            dtype = np.float32 if tensor["datatype"] == "FP32" else np.float64
            given = httpclient.InferInput(tensor["name"], list(rows.shape), tensor["datatype"])
            given.set_data_from_numpy(rows.to_numpy(dtype=dtype), binary_data=True)
            result = client.infer(model, [given])
            for name, want in _expected(served, model, rows).items():
                np.testing.assert_allclose(result.as_numpy(name), want, rtol=1e-5)
        # categorical features as BYTES columns, numeric ones as FP64 columns
        rows = served.frames["diabetes-onehot"].iloc[50:58]
        inputs = []
        for name in rows.columns:
            column = rows[name].to_numpy()
            if name == "sex":
                tensor = httpclient.InferInput(name, [len(rows)], "BYTES")
                tensor.set_data_from_numpy(column.astype(np.object_), binary_data=True)
            else:
                tensor = httpclient.InferInput(name, [len(rows)], "FP64")
                tensor.set_data_from_numpy(column.astype(np.float64), binary_data=True)
            inputs.append(tensor)
        result = client.infer("diabetes-onehot", inputs)
        want = _expected(served, "diabetes-onehot", rows)["predict"]
        np.testing.assert_allclose(result.as_numpy("predict"), want, rtol=1e-6)
    finally:
        client.close()


def _batch_counts(served: Served, model: str) -> tuple[float, float]:
    """``servinglib_batch_size`` (_sum, _count) of ``model`` over every worker."""
    text = requests.get(f"{served.server.url}/metrics", timeout=10).text
    found = {}
    for part in ("sum", "count"):
        pattern = rf'^servinglib_batch_size_{part}{{[^}}]*model="{model}"[^}}]*}} (\S+)$'
        found[part] = sum(float(v) for v in re.findall(pattern, text, re.MULTILINE))
    return found["sum"], found["count"]


@pytest.mark.parametrize("model", ["diabetes-xgb", "cancer-lgb", "cancer"])
def test_sixteen_concurrent_clients_get_the_librarys_answers(served: Served, model: str) -> None:
    frame = served.frames[model]
    before = _batch_counts(served, model)

    def client(index: int) -> None:
        with requests.Session() as session:
            for k in range(12):
                i = (index * 12 + k) % len(frame)
                if k % 3 == 2:  # a v2 request of two rows
                    rows = frame.iloc[i : i + 2]
                    meta = served.models[model]
                    datatype = (
                        "FP64"
                        if model == "cancer"
                        else ("FP32" if model == "diabetes-xgb" else "FP64")
                    )
                    body = {
                        "inputs": [
                            {
                                "name": "input",
                                "datatype": datatype,
                                "shape": list(rows.shape),
                                "data": rows.to_numpy().ravel().tolist(),
                            }
                        ]
                    }
                    r = session.post(
                        f"{served.server.url}/v2/models/{model}/infer", json=body, timeout=30
                    )
                    assert r.status_code == 200, r.text
                    del meta
                    outputs = {o["name"]: o["data"] for o in r.json()["outputs"]}
                    np.testing.assert_allclose(
                        outputs["predict"], _expected(served, model, rows)["predict"], rtol=1e-5
                    )
                    continue
                body = {"model_id": model, "features": frame.iloc[i].to_dict()}
                r = session.post(f"{served.server.url}/infer", json=body, timeout=30)
                assert r.status_code == 200, r.text
                answer = r.json()["output"]
                _check_rows(served, model, {k: [v] for k, v in answer.items()}, frame.iloc[[i]])

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(client, range(16)))
    after = _batch_counts(served, model)
    requests_run, batches_run = after[0] - before[0], after[1] - before[1]
    assert requests_run == 16 * 12
    assert batches_run < requests_run  # some batches held several requests


HOSTILE: list[tuple[str, Any, str]] = [
    ("a string for a number", ["old"] + [0.1] * 9, "features.age of model 'diabetes-xgb' must be"),
    ("a missing feature", {"age": 0.1}, "missing ['sex', 'bmi'"),
    ("a wrong type", "age=40", "takes an object"),
    ("empty rows", {"rows": []}, "non-empty list"),
    ("a short list", [1.0, 2.0], "holds the 10 features"),
    ("a nested object", {"rows": [[{"x": 1}] * 10]}, "must be a number"),
    ("an integer past float64", [10**400] * 10, ""),
    ("a boolean", [True] * 10, "must be a number"),
]


@pytest.mark.parametrize(("case", "features", "message"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_infer_inputs_get_400_naming_the_problem(
    served: Served, case: str, features: Any, message: str
) -> None:
    response = served.infer("diabetes-xgb", features)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]


def test_hostile_tensors_get_400_and_the_server_keeps_serving(served: Served) -> None:
    frame = served.frames["cancer"]
    wrong_width = {
        "inputs": [{"name": "input", "datatype": "FP64", "shape": [1, 3], "data": [1, 2, 3]}]
    }
    assert served.v2("cancer", wrong_width).status_code == 400
    wrong_type = {
        "inputs": [{"name": "input", "datatype": "INT64", "shape": [1, 30], "data": [1] * 30}]
    }
    assert served.v2("cancer", wrong_type).status_code == 400
    missing_column = {"inputs": [{"name": "age", "datatype": "FP64", "shape": [1], "data": [1]}]}
    assert served.v2("diabetes-onehot", missing_column).status_code == 400
    sex_as_number = {
        "inputs": [{"name": n, "datatype": "FP64", "shape": [1], "data": [0.1]} for n in _DIABETES]
    }
    refused = served.v2("diabetes-onehot", sex_as_number)
    assert refused.status_code == 400
    assert "sex" in refused.text
    row = served.frames["diabetes-onehot"].iloc[0].to_dict()
    number_for_category = served.infer("diabetes-onehot", {**row, "sex": 3})
    assert number_for_category.status_code == 400
    assert "sex" in number_for_category.json()["error"]
    unknown_category = served.infer("diabetes-onehot", {**row, "sex": "x"})
    assert unknown_category.status_code == 400, unknown_category.text
    assert "unknown categor" in unknown_category.json()["error"]
    ok = served.infer("cancer", frame.iloc[0].to_dict())
    assert ok.status_code == 200
    assert json.loads(ok.text)["output"]["predict"] in (0, 1)
