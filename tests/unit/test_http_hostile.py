"""Hostile requests through the real Flask app: transfer codings, redirects, leaked paths,
request ids and datatypes all get a JSON 4xx (or a JSON 503 that names no file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from servinglib.errors import public_reason
from servinglib.serve.app import create_app_from_config

INFER_BODY = json.dumps({"model_id": "scorer", "features": {"x": 1.0}})
V2_BODY = json.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "FP64", "data": [1.0]}]})


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/infer", INFER_BODY),
        ("POST", "/v2/models/echo/infer", V2_BODY),
        ("POST", "/v2/repository/index", "{}"),
        ("GET", "/readyz", ""),
    ],
)
@pytest.mark.parametrize("coding", ["gzip, chunked", "gzip", "chunked, chunked", "identity"])
def test_transfer_codings_other_than_chunked_are_refused_with_a_json_501(
    client: FlaskClient, method: str, path: str, body: str, coding: str
) -> None:
    response = client.open(
        path,
        method=method,
        data=body,
        headers={"Transfer-Encoding": coding, "Content-Type": "application/json"},
    )
    assert response.status_code == 501
    assert response.mimetype == "application/json"
    assert "Transfer-Encoding" in response.get_json()["error"]


@pytest.mark.parametrize(
    "path", ["//readyz", "/v2//models//scorer", "/v2/models//scorer/ready", "//models", "/models/"]
)
def test_paths_are_never_redirected_they_are_a_json_404(client: FlaskClient, path: str) -> None:
    response = client.get(path, headers={"Host": "attacker.example"})
    assert response.status_code == 404
    assert response.mimetype == "application/json"
    assert "Location" not in response.headers


def test_every_error_status_of_the_routes_is_json(client: FlaskClient) -> None:
    for method, path in [("DELETE", "/readyz"), ("PUT", "/infer"), ("PATCH", "/v2/models/echo")]:
        response = client.open(path, method=method)
        assert response.status_code == 405, (method, path)
        assert response.mimetype == "application/json"
        assert response.get_json()["error"]


def broken_service(tmp_path: Path) -> Path:
    repository = tmp_path / "repo"
    (repository / "1").mkdir(parents=True)
    (tmp_path / "model.py").write_text(
        "import servinglib\n\n"
        "class Broken(servinglib.Model):\n"
        "    def load(self, path):\n"
        "        (path / 'weights' / 'missing.npz').read_bytes()\n\n"
        "    def predict(self, features):\n"
        "        return features\n"
    )
    config = tmp_path / "servinglib.yaml"
    config.write_text(
        "service: broken\nmodels:\n"
        "  - {name: broken, class: model.py:Broken, repository: repo, default_version: '1'}\n"
    )
    return config


def test_public_answers_name_no_absolute_path_the_record_keeps_it(tmp_path: Path) -> None:
    app = create_app_from_config(broken_service(tmp_path))
    client = app.test_client()
    answers = [
        client.get("/models"),
        client.get("/readyz"),
        client.post("/v2/repository/index", json={}),
        client.post("/infer", json={"model_id": "broken", "features": {}}),
        client.post("/v2/models/broken/infer", data=V2_BODY, content_type="application/json"),
        client.get("/v2/models/broken/ready"),
    ]
    for response in answers:
        text = response.get_data(as_text=True)
        assert str(tmp_path) not in text, text
        assert "Traceback" not in text
    assert answers[0].status_code == 200
    reason = answers[0].get_json()["models"][0]["versions"][0]["reason"]
    assert reason.startswith("load() raised FileNotFoundError")
    assert ".../missing.npz" in reason
    assert answers[3].status_code == 503
    assert ".../missing.npz" in answers[3].get_json()["error"]
    # The full reason stays for the log and the admin API (inside the service: white-box).
    record = app.extensions["servinglib.serving.service"]._registry.record("broken", "1")
    assert str(tmp_path) in record.reason


def test_public_reason_keeps_one_short_line() -> None:
    assert public_reason("a\n  File '/x/y.py', line 1") == "a"
    assert len(public_reason("x" * 1000)) == 200
    assert public_reason("C:\\srv\\m\\w.bin missing") == ".../w.bin missing"
    assert public_reason("send it to /infer") == "send it to /infer"


def test_the_v2_id_is_echoed_and_the_x_request_id_is_what_the_log_keys_on(
    client: FlaskClient,
) -> None:
    body = json.loads(V2_BODY)
    body["id"] = "client-42"
    response = client.post("/v2/models/echo/infer", json=body, headers={"x-request-id": "edge-7"})
    assert response.status_code == 200
    assert response.get_json()["id"] == "client-42"
    assert response.headers["x-request-id"] == "edge-7"
    body["id"] = "x" * 50_000
    response = client.post("/v2/models/echo/infer", json=body)
    assert response.status_code == 400
    assert "`id`" in response.get_json()["error"]


def nan_service(tmp_path: Path) -> Path:
    (tmp_path / "repo" / "1").mkdir(parents=True)
    (tmp_path / "model.py").write_text(
        "import math\nimport servinglib\n\n"
        "class Nan(servinglib.Model):\n"
        "    def load(self, path):\n"
        "        pass\n\n"
        "    def predict(self, features):\n"
        "        return {'y': [math.nan, 1.0]}\n"
    )
    config = tmp_path / "servinglib.yaml"
    config.write_text(
        "service: nan\nmodels:\n  - {name: nan, class: model.py:Nan, repository: repo, "
        "default_version: '1', require_self_tests: false}\n"
    )
    return config


def test_a_non_finite_output_is_a_500_naming_the_model_and_counted(tmp_path: Path) -> None:
    client = create_app_from_config(nan_service(tmp_path)).test_client()
    answers = [
        client.post("/infer", json={"model_id": "nan", "features": {}}),
        client.post("/v2/models/nan/infer", data=V2_BODY, content_type="application/json"),
    ]
    for response in answers:
        assert response.status_code == 500
        message = response.get_json()["error"]
        assert "model 'nan' version '1' answered NaN or Infinity" in message
        assert "not of the request" in message
    binary = json.loads(V2_BODY) | {"parameters": {"binary_data_output": True}}
    response = client.post("/v2/models/nan/infer", json=binary)
    assert response.status_code == 200  # binary outputs carry NaN as it is
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'outcome="nonfinite_output"' in metrics
