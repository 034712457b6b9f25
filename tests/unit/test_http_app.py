"""servinglib.http: statuses, error bodies, headers and protocols, through the real Flask app."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from servinglib.config.spec import ServerConfig, load_config
from servinglib.http.app import create_app
from servinglib.lifecycle.registry import ModelRegistry
from servinglib.monitoring.metrics import ServingMetrics
from servinglib.serving.service import InferenceService


def infer(client: FlaskClient, body: Any, **kwargs: Any) -> Any:
    return client.post("/infer", json=body, **kwargs)


def test_infer_answers_with_the_default_version(client: FlaskClient) -> None:
    response = infer(client, {"model_id": "scorer", "features": {"x": 2.0}})
    assert response.status_code == 200
    body = response.get_json()
    assert body["model_id"] == "scorer"
    assert body["version"] == "2"
    assert body["output"] == {"score": 6.0}
    assert body["request_id"] == response.headers["x-request-id"]
    assert response.headers["x-servinglib-model-version"] == "2"


def test_infer_with_an_explicit_version(client: FlaskClient) -> None:
    body = infer(client, {"model_id": "scorer", "version": "1", "features": {"x": 2.0}}).get_json()
    assert (body["version"], body["output"]) == ("1", {"score": 4.0})


def test_request_id_is_echoed_or_generated(client: FlaskClient) -> None:
    response = infer(
        client, {"model_id": "scorer", "features": {"x": 1}}, headers={"x-request-id": "abc-123"}
    )
    assert response.headers["x-request-id"] == "abc-123"
    assert response.get_json()["request_id"] == "abc-123"
    unsafe = infer(
        client, {"model_id": "scorer", "features": {"x": 1}}, headers={"x-request-id": "a b\x01"}
    )
    assert unsafe.headers["x-request-id"] != "a b\x01"
    assert len(unsafe.headers["x-request-id"]) == 32


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            {"model_id": "nope", "features": {}},
            404,
            "unknown model 'nope'; available models: scorer, echo, whoami",
        ),
        (
            {"model_id": "scorer", "version": "9", "features": {"x": 1}},
            404,
            "available versions: 1, 2, 3, 4",
        ),
        (
            {"model_id": "scorer", "version": "3", "features": {"x": 1}},
            503,
            "is FAILED (load() raised",
        ),
        (
            {"model_id": "scorer", "version": "4", "features": {"x": 1}},
            503,
            "self-test 'wrong expectation'",
        ),
        ({"model_id": "scorer", "features": {"y": 1}}, 400, "'x' is a required property"),
        (
            {"model_id": "scorer", "features": {"x": "one"}},
            400,
            "features.x: 'one' is not of type 'number'",
        ),
        ({"model_id": "scorer"}, 400, "`features` is required"),
        ({"features": {}}, 400, "`model_id` is required"),
        ({"model_id": "scorer", "version": 2, "features": {}}, 400, "`version` must be a string"),
        ({"model_id": "scorer", "features": {}, "extra": 1}, 400, "unknown key(s) ['extra']"),
        ([1, 2], 400, "must be a JSON object"),
    ],
)
def test_errors_are_json_with_the_right_status(
    client: FlaskClient, body: Any, status: int, message: str
) -> None:
    response = infer(client, body)
    assert response.status_code == status
    assert response.mimetype == "application/json"
    assert message in response.get_json()["error"]


def test_not_ready_says_when_to_retry(client: FlaskClient) -> None:
    response = infer(client, {"model_id": "scorer", "version": "3", "features": {"x": 1}})
    assert response.headers["Retry-After"] == "5"


def test_model_exception_is_500_with_error_id_and_no_details(client: FlaskClient) -> None:
    response = infer(client, {"model_id": "scorer", "features": {"x": 1, "explode": True}})
    assert response.status_code == 500
    error = response.get_json()["error"]
    assert "error id" in error
    assert "secret" not in error
    assert "Traceback" not in response.get_data(as_text=True)
    assert infer(client, {"model_id": "scorer", "features": {"x": 1}}).status_code == 200


def test_invalid_json_wrong_content_type_and_method(client: FlaskClient) -> None:
    bad = client.post("/infer", data=b"{nope", content_type="application/json")
    assert bad.status_code == 400
    assert "not valid JSON" in bad.get_json()["error"]
    form = client.post("/infer", data=b"a=1", content_type="application/x-www-form-urlencoded")
    assert form.status_code == 415
    assert "send application/json" in form.get_json()["error"]
    get = client.get("/infer")
    assert get.status_code == 405
    assert "error" in get.get_json()
    missing = client.get("/no/such/path")
    assert missing.status_code == 404
    assert missing.mimetype == "application/json"


def test_body_too_large_is_413_json(service_config: Path) -> None:
    config = load_config(service_config, environ={})
    registry = ModelRegistry(config)
    registry.load_all()
    app = create_app(
        InferenceService(registry), ServingMetrics(), ServerConfig(max_request_body_bytes=2048)
    )
    response = app.test_client().post("/infer", json={"model_id": "echo", "features": "x" * 4096})
    assert response.status_code == 413
    assert "larger than the limit of 2048 bytes" in response.get_json()["error"]
    metrics = app.test_client().get("/metrics").get_data(as_text=True)
    assert (
        'servinglib_requests_total{model="_unknown",outcome="too_large",protocol="infer",version=""} 1.0'
        in metrics
    )


def test_probes(client: FlaskClient) -> None:
    assert client.get("/livez").status_code == 200
    ready = client.get("/readyz")
    assert ready.status_code == 200
    live = client.get("/v2/health/live")
    assert (live.status_code, live.get_json()) == (200, {"live": True})
    ready_v2 = client.get("/v2/health/ready")
    assert (ready_v2.status_code, ready_v2.get_json()) == (200, {"ready": True})


def test_models_listing_shows_failure_reasons(client: FlaskClient) -> None:
    models = {m["name"]: m for m in client.get("/models").get_json()["models"]}
    scorer = {v["version"]: v for v in models["scorer"]["versions"]}
    assert models["scorer"]["default_version"] == "2"
    assert scorer["2"] == {"version": "2", "state": "READY"}
    assert scorer["3"]["state"] == "FAILED"
    assert "weights are corrupt" in scorer["3"]["reason"]
    index = client.post("/v2/repository/index").get_json()
    assert {"name": "scorer", "version": "4", "state": "FAILED"}.items() <= next(
        e for e in index if e["name"] == "scorer" and e["version"] == "4"
    ).items()
    ready_only = client.post("/v2/repository/index", json={"ready": True}).get_json()
    assert all(e["state"] == "READY" for e in ready_only)


def test_v2_metadata_config_and_readiness(client: FlaskClient) -> None:
    server = client.get("/v2").get_json()
    assert server["name"] == "servinglib"
    assert "binary_tensor_data" in server["extensions"]
    meta = client.get("/v2/models/scorer").get_json()
    assert meta["name"] == "scorer"
    assert meta["versions"] == ["1", "2"]
    assert client.get("/v2/models/scorer/versions/1").status_code == 200
    assert client.get("/v2/models/scorer/versions/3").status_code == 503
    assert client.get("/v2/models/scorer/ready").status_code == 200
    assert client.get("/v2/models/scorer/versions/4/ready").status_code == 400
    assert client.get("/v2/models/nope/ready").status_code == 404
    config = client.get("/v2/models/scorer/config").get_json()
    assert config["max_batch_size"] == 0
    assert "dynamic_batching" not in config
    assert (config["platform"], config["backend"]) == ("", "python")
    assert config["version_policy"] == {"specific": {"versions": [1, 2, 3, 4]}}


def test_v2_infer_json(client: FlaskClient) -> None:
    response = client.post(
        "/v2/models/echo/infer",
        json={
            "id": "q",
            "inputs": [
                {"name": "a", "shape": [2, 2], "datatype": "FP32", "data": [[1.5, 2], [3, 4]]},
                {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["héllo"]},
            ],
        },
    )
    assert response.status_code == 200
    body = response.get_json()
    assert body["model_name"] == "echo"
    assert body["model_version"] == "1"
    assert body["id"] == "q"
    assert body["outputs"] == [
        {"name": "a", "datatype": "FP32", "shape": [2, 2], "data": [1.5, 2.0, 3.0, 4.0]},
        {"name": "s", "datatype": "BYTES", "shape": [1], "data": ["héllo"]},
    ]


def test_v2_infer_binary(client: FlaskClient) -> None:
    array = np.arange(6, dtype=np.float16).reshape(2, 3)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "h",
                    "shape": [2, 3],
                    "datatype": "FP16",
                    "parameters": {"binary_data_size": array.nbytes},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    response = client.post(
        "/v2/models/echo/versions/1/infer",
        data=header + array.tobytes(),
        headers={
            "Inference-Header-Content-Length": str(len(header)),
            "Content-Type": "application/octet-stream",
        },
    )
    assert response.status_code == 200
    length = int(response.headers["Inference-Header-Content-Length"])
    head = json.loads(response.data[:length])
    assert head["outputs"][0]["parameters"]["binary_data_size"] == array.nbytes
    assert response.data[length:] == array.tobytes()


def test_v2_errors(client: FlaskClient) -> None:
    bad = client.post("/v2/models/echo/infer", json={"inputs": [{"name": "x"}]})
    assert bad.status_code == 400
    assert bad.get_json()["error"].startswith("inputs[0] ('x').shape")
    assert client.post("/v2/models/nope/infer", json={"inputs": []}).status_code == 404
    # Any content type: without Inference-Header-Content-Length the body is JSON.
    labelled = client.post(
        "/v2/models/echo/infer",
        data=json.dumps(
            {"inputs": [{"name": "a", "shape": [1], "datatype": "INT32", "data": [7]}]}
        ),
        content_type="application/octet-stream",
    )
    assert labelled.status_code == 200, labelled.get_json()
    not_json = client.post("/v2/models/echo/infer", data=b"x", content_type="text/plain")
    assert not_json.status_code == 400
    unknown_coding = client.post(
        "/v2/models/echo/infer", data=b"{}", headers={"Content-Encoding": "br"}
    )
    assert unknown_coding.status_code == 415
    assert "'br' is not supported" in unknown_coding.get_json()["error"]
    header = client.post(
        "/v2/models/echo/infer", data=b"{}", headers={"Inference-Header-Content-Length": "x"}
    )
    assert header.status_code == 400


def test_openapi_names_each_model(client: FlaskClient) -> None:
    document = client.get("/openapi.json").get_json()
    assert document["openapi"].startswith("3.")
    assert "/infer" in document["paths"]
    assert "/v2/models/{model}/infer" in document["paths"]
    variants = document["components"]["schemas"]["InferRequest"]["oneOf"]
    scorer = next(v for v in variants if v["title"] == "scorer")
    assert scorer["properties"]["features"]["required"] == ["x"]


def test_metrics_count_requests_by_outcome(client: FlaskClient) -> None:
    infer(client, {"model_id": "scorer", "features": {"x": 1}})
    infer(client, {"model_id": "scorer", "features": {"x": 1, "explode": True}})
    infer(client, {"model_id": "unknown-model", "features": {}})
    text = client.get("/metrics").get_data(as_text=True)
    assert (
        'servinglib_requests_total{model="scorer",outcome="success",protocol="infer",version="2"} 1.0'
        in text
    )
    assert (
        'servinglib_requests_total{model="scorer",outcome="model_error",protocol="infer",version="2"} 1.0'
        in text
    )
    assert (
        'servinglib_requests_total{model="_unknown",outcome="not_found",protocol="infer",version=""} 1.0'
        in text
    )
    assert 'servinglib_model_state{model="scorer",state="FAILED",version="3"} 1.0' in text
    assert 'servinglib_model_self_test_passed{model="scorer",version="4"} 0.0' in text
    assert "servinglib_requests_in_flight" in text


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"model_id": "scorer", "features": {"x": NaN}}', "NaN, which is not JSON"),
        (b'{"model_id": "scorer", "features": {"x": Infinity}}', "Infinity, which is not JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b"[" * 10_000 + b"]" * 10_000, "nests deeper than"),
        (b'{"model_id": "scorer", "features": {"x": ' + b"9" * 5000 + b"}}", "refuses"),
        (b'{"model_id": "scorer", "features": {"x": 1e400}}', "overflows a 64-bit float"),
        (
            b'{"model_id": "scorer", "features": ' + b"[" * 70 + b"]" * 70 + b"}",
            "nests deeper than 64",
        ),
    ],
)
def test_hostile_json_is_a_400(client: FlaskClient, body: bytes, message: str) -> None:
    response = client.post("/infer", data=body, content_type="application/json")
    assert response.status_code == 400
    assert message in response.get_json()["error"]
    v2 = client.post("/v2/models/echo/infer", data=body, content_type="application/json")
    assert v2.status_code == 400


def test_tensor_element_limit(client: FlaskClient) -> None:
    response = client.post(
        "/v2/models/echo/infer",
        json={
            "inputs": [{"name": "x", "shape": [10_000, 10_000], "datatype": "FP32", "data": [1]}]
        },
    )
    assert response.status_code == 400
    assert "server.max_tensor_elements" in response.get_json()["error"]


def test_many_dimensions_are_refused_quickly(client: FlaskClient) -> None:
    import time

    started = time.perf_counter()
    response = client.post(
        "/v2/models/echo/infer",
        json={"inputs": [{"name": "x", "shape": [7] * 100_000, "datatype": "FP32", "data": [1]}]},
    )
    assert response.status_code == 400
    assert "dimensions" in response.get_json()["error"]
    assert time.perf_counter() - started < 2


def test_envoy_deadline_header_gives_504(tmp_path: Path) -> None:
    import shutil

    from servinglib.serve.app import create_app_from_config

    fixture = Path(__file__).parents[1] / "fixtures" / "batching"
    shutil.copytree(fixture, tmp_path / "svc")
    client = create_app_from_config(tmp_path / "svc" / "servinglib.yaml").test_client()
    slow = client.post(
        "/infer",
        json={"model_id": "summer", "features": {"values": [1]}},
        headers={"x-envoy-expected-rq-timeout-ms": "1"},
    )
    assert slow.status_code == 504
    assert "deadline" in slow.get_json()["error"]
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'outcome="deadline_exceeded"' in metrics
    fine = client.post(
        "/infer",
        json={"model_id": "summer", "features": {"values": [1]}},
        headers={"x-envoy-expected-rq-timeout-ms": "5000"},
    )
    assert fine.status_code == 200


def test_v2_infer_compressed_both_ways(client: FlaskClient) -> None:
    import gzip
    import zlib

    values = [1.5, 2.0, 3.0] * 10_000  # an answer above server.compress_min_bytes (64 KiB)
    body = json.dumps(
        {"inputs": [{"name": "a", "shape": [len(values)], "datatype": "FP64", "data": values}]}
    ).encode()
    for coding, packed in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        response = client.post(
            "/v2/models/echo/infer",
            data=packed,
            headers={"Content-Encoding": coding, "Accept-Encoding": coding},
        )
        assert response.status_code == 200, response.data
        assert response.headers["Content-Encoding"] == coding
        assert "Accept-Encoding" in response.headers["Vary"]
        answer = (
            gzip.decompress(response.data) if coding == "gzip" else zlib.decompress(response.data)
        )
        assert json.loads(answer)["outputs"][0]["data"] == values
    plain = client.post("/v2/models/echo/infer", data=body)
    assert "Content-Encoding" not in plain.headers
    small = json.dumps(
        {"inputs": [{"name": "a", "shape": [3], "datatype": "FP64", "data": [1.5, 2, 3]}]}
    ).encode()
    answer = client.post("/v2/models/echo/infer", data=small, headers={"Accept-Encoding": "gzip"})
    assert "Content-Encoding" not in answer.headers  # below compress_min_bytes: not worth it
    assert "Vary" not in answer.headers  # and the same whatever Accept-Encoding says
