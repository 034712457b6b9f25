"""servinglib.http.asgi: the default worker's front end, driven as an ASGI app without sockets.

Each test hands the app a scope and the body in ASGI messages, as uvicorn would, and reads
back what the app sends: the inference exchange on the loop, the Flask routes on threads.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from servinglib.http.app import create_asgi_app
from servinglib.http.asgi import AsgiFrontEnd
from servinglib.serving.assembly import Worker, load_worker
from tests.conftest import SERVICE_CONFIG


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    loaded = load_worker(SERVICE_CONFIG)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def front(worker: Worker) -> AsgiFrontEnd:
    return create_asgi_app(worker.service, worker.metrics, worker.config.server)


def call(
    app: AsgiFrontEnd,
    method: str,
    path: str,
    body: bytes | Sequence[bytes] = b"",
    headers: Sequence[tuple[str, str]] = (("content-type", "application/json"),),
    disconnect_after_chunks: bool = False,
) -> Answer:
    """One request through ``app``; ``body`` as one message or several (a chunked upload)."""
    chunks = [body] if isinstance(body, bytes) else list(body)
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    if disconnect_after_chunks:
        messages[-1]["more_body"] = True
        messages.append({"type": "http.disconnect"})
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(dict(message))

    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "path": path,
        "query_string": b"",
        "headers": [(k.encode(), v.encode()) for k, v in headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body_bytes = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    decoded = {k.decode(): v.decode() for k, v in start["headers"]}
    return Answer(start["status"], decoded, body_bytes)


def infer_body(x: float, **extra: Any) -> bytes:
    return json.dumps({"model_id": "scorer", "features": {"x": x}, **extra}).encode()


def test_infer_is_answered_on_the_loop_with_the_default_version(front: AsgiFrontEnd) -> None:
    answer = call(front, "POST", "/infer", infer_body(2.0))
    assert answer.status == 200
    body = answer.json()
    assert (body["model_id"], body["version"], body["output"]) == ("scorer", "2", {"score": 6.0})
    assert answer.headers["x-request-id"] == body["request_id"]
    assert answer.headers["x-servinglib-model-version"] == "2"
    assert int(answer.headers["content-length"]) == len(answer.body)


def test_a_body_in_several_messages_is_joined(front: AsgiFrontEnd) -> None:
    raw = infer_body(1.5, version="1")
    answer = call(front, "POST", "/infer", [raw[:7], raw[7:20], raw[20:]])
    assert answer.status == 200
    assert answer.json()["output"] == {"score": 3.0}


def test_a_client_gone_before_the_whole_body_gets_400(front: AsgiFrontEnd) -> None:
    answer = call(front, "POST", "/infer", [b'{"model_id": '], disconnect_after_chunks=True)
    assert answer.status == 400
    assert "disconnected" in answer.json()["error"]


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "message"),
    [
        ("GET", "/infer", b"", (), 405, "not allowed"),
        ("POST", "/infer", b"{", (("content-type", "application/json"),), 400, "JSON"),
        ("POST", "/infer", b"{}", (("content-type", "text/csv"),), 415, "application/json"),
        (
            "POST",
            "/infer",
            json.dumps({"model_id": "nope", "features": {}}).encode(),
            (("content-type", "application/json"),),
            404,
            "unknown model 'nope'",
        ),
        (
            "POST",
            "/infer",
            json.dumps({"model_id": "scorer", "features": {"x": "two"}}).encode(),
            (("content-type", "application/json"),),
            400,
            "'two' is not of type 'number'",
        ),
        (
            "POST",
            "/v2/models/nope/infer",
            b'{"inputs": []}',
            (("content-type", "application/json"),),
            404,
            "unknown model 'nope'",
        ),
    ],
)
def test_refusals_are_json_with_the_status_describe_gives(
    front: AsgiFrontEnd,
    method: str,
    path: str,
    body: bytes,
    headers: tuple[tuple[str, str], ...],
    status: int,
    message: str,
) -> None:
    answer = call(front, method, path, body, headers)
    assert answer.status == status
    assert answer.headers["content-type"] == "application/json"
    assert message in answer.json()["error"]
    if status == 405:
        assert answer.headers["allow"] == "POST"


def test_a_declared_length_over_the_limit_is_refused_before_reading(
    front: AsgiFrontEnd, worker: Worker
) -> None:
    limit = worker.config.server.max_request_body_bytes
    headers = (("content-type", "application/json"), ("content-length", str(limit + 1)))
    answer = call(front, "POST", "/infer", b"", headers)
    assert answer.status == 413


def test_a_body_over_the_limit_without_a_declared_length_is_refused(
    front: AsgiFrontEnd, worker: Worker
) -> None:
    limit = worker.config.server.max_request_body_bytes
    chunk = b" " * (64 * 1024)
    chunks = [chunk] * (limit // len(chunk) + 2)
    answer = call(front, "POST", "/infer", chunks)
    assert answer.status == 413


def test_a_gzip_request_body_is_inflated(front: AsgiFrontEnd) -> None:
    headers = (("content-type", "application/json"), ("content-encoding", "gzip"))
    answer = call(front, "POST", "/infer", gzip.compress(infer_body(4.0)), headers)
    assert answer.status == 200
    assert answer.json()["output"] == {"score": 12.0}


def test_open_inference_json_and_binary_take_the_same_path(front: AsgiFrontEnd) -> None:
    request = {"inputs": [{"name": "a", "shape": [2], "datatype": "INT32", "data": [7, 8]}]}
    answer = call(front, "POST", "/v2/models/echo/infer", json.dumps(request).encode())
    assert answer.status == 200
    outputs = {o["name"]: o for o in answer.json()["outputs"]}
    assert outputs["a"]["data"] == [7, 8]
    assert answer.headers["x-servinglib-model-version"] == "1"

    array = np.arange(4, dtype=np.float32)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "f",
                    "shape": [4],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": array.nbytes},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    binary = call(
        front,
        "POST",
        "/v2/models/echo/versions/1/infer",
        header + array.tobytes(),
        (
            ("content-type", "application/octet-stream"),
            ("inference-header-content-length", str(len(header))),
        ),
    )
    assert binary.status == 200
    length = int(binary.headers["inference-header-content-length"])
    reply = json.loads(binary.body[:length])
    assert reply["model_name"] == "echo"
    assert [o["name"] for o in reply["outputs"]] == ["f"]
    assert np.array_equal(np.frombuffer(binary.body[length:], dtype=np.float32), array)


def test_other_routes_are_served_by_flask_on_a_thread(front: AsgiFrontEnd) -> None:
    assert call(front, "GET", "/livez").status == 200
    models = call(front, "GET", "/models")
    assert models.status == 200
    names = {entry["name"] for entry in models.json()["models"]}
    assert {"scorer", "echo", "whoami"} <= names
    missing = call(front, "GET", "/no-such-route")
    assert missing.status == 404


def test_lifespan_startup_and_shutdown_complete(front: AsgiFrontEnd) -> None:
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    asyncio.run(front({"type": "lifespan"}, receive, send))
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
