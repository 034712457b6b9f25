"""Open Inference Protocol v2 over real HTTP: exact round trips, and Triton's own client."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
import requests

from tests.conftest import LiveServer

pytestmark = pytest.mark.integration

TENSORS = {
    "BOOL": np.array([[True, False, True]]),
    "UINT8": np.array([0, 7, 255], dtype=np.uint8),
    "UINT16": np.array([65535], dtype=np.uint16),
    "UINT32": np.array([2**32 - 1, 0], dtype=np.uint32),
    "UINT64": np.array([2**64 - 1], dtype=np.uint64),
    "INT8": np.array([-128, 127], dtype=np.int8),
    "INT16": np.array([-32768, 32767], dtype=np.int16),
    "INT32": np.array([[-(2**31)], [2**31 - 1]], dtype=np.int32),
    "INT64": np.array([-(2**63), 2**63 - 1], dtype=np.int64),
    "FP16": np.array([0.1, 65504.0, -0.0], dtype=np.float16),
    "FP32": np.array([[np.pi, -1e-30], [3.4e38, 0.5]], dtype=np.float32),
    "FP64": np.array([np.e, 1e-300, -1.7976931348623157e308]),
}
STRINGS = ["", "plain", "ünïcödé ✓", "tab\tnewline\n"]


def _bytes_payload(values: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


def test_json_tensors_round_trip_exactly(fixture_server: LiveServer) -> None:
    inputs: list[dict[str, Any]] = [
        {"name": name, "shape": list(a.shape), "datatype": name, "data": a.tolist()}
        for name, a in TENSORS.items()
    ]
    inputs.append(
        {"name": "text", "shape": [2, 2], "datatype": "BYTES", "data": [STRINGS[:2], STRINGS[2:]]}
    )
    response = requests.post(
        f"{fixture_server.url}/v2/models/echo/infer",
        json={"id": "json-1", "inputs": inputs},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == "json-1"
    outputs = {o["name"]: o for o in body["outputs"]}
    for name, array in TENSORS.items():
        out = outputs[name]
        assert (out["datatype"], out["shape"]) == (name, list(array.shape))
        decoded = np.array(out["data"], dtype=array.dtype).reshape(out["shape"])
        assert decoded.tobytes() == array.tobytes(), name
    assert outputs["text"] == {
        "name": "text",
        "datatype": "BYTES",
        "shape": [2, 2],
        "data": STRINGS,
    }


def test_binary_tensors_round_trip_bit_exact(fixture_server: LiveServer) -> None:
    raw_strings = [s.encode() for s in STRINGS] + [b"\xff\x00not utf-8"]
    chunks = {
        name: array.astype(array.dtype.newbyteorder("<")).tobytes()
        for name, array in TENSORS.items()
    }
    chunks["blob"] = _bytes_payload(raw_strings)
    shapes = {**{n: list(a.shape) for n, a in TENSORS.items()}, "blob": [len(raw_strings)]}
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": n,
                    "shape": shapes[n],
                    "datatype": "BYTES" if n == "blob" else n,
                    "parameters": {"binary_data_size": len(c)},
                }
                for n, c in chunks.items()
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    response = requests.post(
        f"{fixture_server.url}/v2/models/echo/versions/1/infer",
        data=header + b"".join(chunks.values()),
        headers={
            "Inference-Header-Content-Length": str(len(header)),
            "Content-Type": "application/octet-stream",
        },
        timeout=10,
    )
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "application/octet-stream"
    length = int(response.headers["Inference-Header-Content-Length"])
    head = json.loads(response.content[:length])
    offset = length
    for output in head["outputs"]:
        size = output["parameters"]["binary_data_size"]
        assert response.content[offset : offset + size] == chunks[output["name"]], output["name"]
        assert output["shape"] == shapes[output["name"]]
        offset += size
    assert offset == len(response.content)


def test_triton_http_client_works_unchanged(fixture_server: LiveServer) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url=fixture_server.url.removeprefix("http://"))
    try:
        assert client.is_server_live()
        assert client.is_server_ready()
        assert client.is_model_ready("echo")
        assert not client.is_model_ready("scorer", "3")
        assert client.get_server_metadata()["name"] == "servinglib"
        assert client.get_model_metadata("echo")["versions"] == ["1"]
        assert client.get_model_config("scorer")["name"] == "scorer"
        values = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
        words = np.array([b"alpha", b"\xce\xb2eta"], dtype=np.object_)
        for binary in (False, True):
            x = httpclient.InferInput("x", list(values.shape), "FP32")
            x.set_data_from_numpy(values, binary_data=binary)
            w = httpclient.InferInput("w", [2], "BYTES")
            w.set_data_from_numpy(words, binary_data=binary)
            outputs = [
                httpclient.InferRequestedOutput("x", binary_data=binary),
                httpclient.InferRequestedOutput("w", binary_data=binary),
            ]
            result = client.infer("echo", [x, w], outputs=outputs, request_id=f"triton-{binary}")
            np.testing.assert_array_equal(result.as_numpy("x"), values)
            assert [
                bytes(v) if isinstance(v, bytes) else str(v).encode() for v in result.as_numpy("w")
            ] == list(words)
            assert result.get_response()["id"] == f"triton-{binary}"
        with pytest.raises(httpclient.InferenceServerException, match="unknown model"):
            client.infer("ghost", [x])
    finally:
        client.close()
