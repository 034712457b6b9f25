"""The exchange and both inference protocols, without a transport.

``Endpoints.match`` decides which paths are inference requests; ``InferProtocol`` and
``V2Protocol`` turn bodies into the service's request and predictions into bodies; the
exchange runs the five steps (head, parse, call, encode, record) that both transports share.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from servinglib.config.spec import ServerConfig
from servinglib.errors import (
    InvalidInputError,
    ModelNotFoundError,
    NonFiniteOutputError,
    PredictionError,
)
from servinglib.http._exchange import Endpoints
from servinglib.http._protocols import InferProtocol, V2Protocol
from servinglib.http.errors import HttpError
from servinglib.serving.assembly import Worker, load_worker
from servinglib.serving.service import Prediction
from tests.conftest import SERVICE_CONFIG


class FakeHead:
    """What a protocol reads of a request head (the exchange is the real implementation)."""

    def __init__(self, headers: dict[str, str] | None = None) -> None:
        self.request_id = "rid-1"
        self.timeout_ms: float | None = 250.0
        self.waited_s = 0.0
        self.trace: object = None
        self._headers = headers or {}

    def header(self, name: str) -> str | None:
        return self._headers.get(name)

    def routing_key(self, model: str) -> str | None:
        return f"key-of-{model}"

    def lane(self, model: str) -> None:
        return None


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    loaded = load_worker(SERVICE_CONFIG)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def endpoints(worker: Worker) -> Endpoints:
    return Endpoints(worker.service, worker.metrics, worker.config.server)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/infer", ("infer", None, None)),
        ("/v2/models/echo/infer", ("v2", "echo", None)),
        ("/v2/models/echo/versions/1/infer", ("v2", "echo", "1")),
        ("/v2/models//infer", None),
        ("/v2/models/echo/versions//infer", None),
        ("/v2/models/echo/ready", None),
        ("/infer/", None),
        ("/models", None),
    ],
)
def test_which_paths_are_inference_requests(
    endpoints: Endpoints, path: str, expected: tuple[str, str | None, str | None] | None
) -> None:
    matched = endpoints.match(path)
    if expected is None:
        assert matched is None
        assert endpoints.open("POST", path, {}.get) is None
    else:
        assert matched is not None
        assert (matched[0].name, matched[1], matched[2]) == expected


def test_infer_protocol_builds_the_request_from_body_and_head() -> None:
    protocol = InferProtocol(ServerConfig())
    body = {"model_id": "eta", "version": "2", "features": {"km": 3}, "priority": 1}
    request, context = protocol.parse(json.dumps(body).encode(), None, None, FakeHead())
    assert context is None
    assert (request.model, request.version, request.inputs) == ("eta", "2", {"km": 3})
    assert (request.request_id, request.routing_key, request.timeout_ms) == (
        "rid-1",
        "key-of-eta",
        250.0,
    )
    assert request.priority == 1
    assert not request.tensors


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[1, 2]", "must be a JSON object"),
        (b'{"features": {}}', "`model_id` is required"),
        (b'{"model_id": "eta", "version": 2, "features": {}}', "`version` must be a string"),
        (b'{"model_id": "eta"}', "`features` is required"),
        (b'{"model_id": "eta", "features": {}, "extra": 1}', "unknown key(s) ['extra']"),
    ],
)
def test_infer_protocol_names_what_is_wrong(body: bytes, message: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        InferProtocol(ServerConfig()).parse(body, None, None, FakeHead())
    assert message in str(caught.value)


def test_infer_protocol_encodes_and_refuses_what_json_cannot_carry() -> None:
    protocol = InferProtocol(ServerConfig())
    encoded = protocol.encode(Prediction("eta", "2", {"eta_s": 1.5}), None, "rid-1")
    assert json.loads(encoded.body) == {
        "model_id": "eta",
        "version": "2",
        "output": {"eta_s": 1.5},
        "request_id": "rid-1",
    }
    assert encoded.content_type == "application/json"
    with pytest.raises(NonFiniteOutputError):
        protocol.encode(Prediction("eta", "2", {"eta_s": float("nan")}), None, "r")
    with pytest.raises(PredictionError):
        protocol.encode(Prediction("eta", "2", {"eta_s": object()}), None, "r")


def test_v2_protocol_takes_json_and_binary_tensors_and_answers_in_kind() -> None:
    protocol = V2Protocol(ServerConfig())
    body = {
        "id": "body-id",
        "inputs": [{"name": "a", "shape": [2], "datatype": "FP32", "data": [1.5, 2.5]}],
    }
    request, context = protocol.parse(json.dumps(body).encode(), "m", "1", FakeHead())
    assert request.tensors
    assert (request.model, request.version, request.request_id) == ("m", "1", "rid-1")
    assert np.array_equal(request.inputs["a"], np.array([1.5, 2.5], dtype=np.float32))
    answer = protocol.encode(Prediction("m", "1", {"y": np.array([3.0])}), context, "rid-1")
    reply = json.loads(answer.body)
    assert (reply["model_name"], reply["model_version"], reply["id"]) == ("m", "1", "body-id")
    assert reply["outputs"][0]["data"] == [3.0]

    array = np.arange(3, dtype=np.int64)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "i",
                    "shape": [3],
                    "datatype": "INT64",
                    "parameters": {"binary_data_size": array.nbytes},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    head = FakeHead({"inference-header-content-length": str(len(header))})
    request, context = protocol.parse(header + array.tobytes(), "m", None, head)
    assert np.array_equal(request.inputs["i"], array)
    answer = protocol.encode(Prediction("m", "1", {"i": array}), context, "rid-1")
    assert answer.content_type == "application/octet-stream"
    (name, length), *_ = answer.headers
    assert name == "Inference-Header-Content-Length"
    assert np.array_equal(np.frombuffer(answer.body[int(length) :], dtype=np.int64), array)


def test_v2_protocol_refuses_an_answer_that_is_not_tensors() -> None:
    protocol = V2Protocol(ServerConfig())
    body = b'{"inputs": [{"name": "a", "shape": [1], "datatype": "INT32", "data": [1]}]}'
    _, context = protocol.parse(body, "m", None, FakeHead())
    with pytest.raises(PredictionError) as caught:
        protocol.encode(Prediction("m", "1", [1, 2]), context, "r")
    assert "returned list, not a dict" in str(caught.value.__cause__)


def test_the_exchange_answers_records_and_refuses_the_same_way(endpoints: Endpoints) -> None:
    headers = {"content-type": "application/json", "x-request-id": "abc-123"}
    exchange = endpoints.open("POST", "/infer", headers.get)
    assert exchange is not None
    exchange.check_head()
    request = exchange.parse(b'{"model_id": "scorer", "features": {"x": 2}}')
    exchange.answered(endpoints.service.infer(request))
    reply = exchange.finish([])
    assert reply.status == 200
    assert json.loads(reply.body)["output"] == {"score": 6.0}
    assert ("x-request-id", "abc-123") in reply.headers
    assert ("x-servinglib-model-version", "2") in reply.headers

    refused = endpoints.open("PUT", "/infer", headers.get)
    assert refused is not None
    with pytest.raises(HttpError) as caught:
        refused.check_head()
    refused.failed(caught.value)
    reply = refused.finish([])
    assert reply.status == 405
    assert ("Allow", "POST") in reply.headers
    assert not reply.shed

    unknown = endpoints.open("POST", "/v2/models/nope/infer", headers.get)
    assert unknown is not None
    with pytest.raises(ModelNotFoundError) as missing:
        unknown.check_head()
    unknown.failed(missing.value)
    assert unknown.finish([]).status == 404


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/v2/models/echo/infer",
            b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.5]}]}',
        ),
        ("/infer", b'{"model_id": "scorer", "features": {"x": 2}}'),
    ],
)
def test_a_request_looks_its_models_lane_up_once(
    endpoints: Endpoints, monkeypatch: pytest.MonkeyPatch, path: str, body: bytes
) -> None:
    service = endpoints.service
    looked_up: list[str] = []
    real = service.lane

    def lane(model: str) -> Any:
        looked_up.append(model)
        return real(model)

    monkeypatch.setattr(service, "lane", lane)
    exchange = endpoints.open("POST", path, {"content-type": "application/json"}.get)
    assert exchange is not None
    exchange.check_head()
    request = exchange.parse(body)
    exchange.answered(service.infer(request))
    assert exchange.finish([]).status == 200
    assert len(looked_up) == 1, looked_up
