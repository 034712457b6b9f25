"""Real clients, unchanged, against a real server: KServe's SDK and Triton's HTTP clients.

Each test drives one client through the operations a user of that client performs: health,
metadata, inference (JSON, binary, BYTES, a named version) and compression both ways.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import LiveServer
from tests.integration._tools import kserve_python

pytestmark = pytest.mark.integration

CLIENTS = Path(__file__).parent / "clients"
VALUES = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
WORDS = np.array([b"alpha", b"\xce\xb2eta", b""], dtype=np.object_)


def _as_bytes(values: np.ndarray) -> list[bytes]:
    return [v if isinstance(v, bytes) else str(v).encode() for v in values.ravel()]


def test_kserve_sdk_rest_client(fixture_server: LiveServer) -> None:
    python = kserve_python()
    result = subprocess.run(
        [str(python), str(CLIENTS / "kserve_rest.py"), fixture_server.url],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["is_server_live"] is True
    assert report["is_server_ready"] is True
    assert report["is_model_ready(echo)"] is True
    assert report["is_model_ready(ghost)"] is False
    assert report["server_metadata.name"] == "servinglib"
    assert report["model_metadata"] == {"name": "echo", "versions": ["1"]}
    for binary in (False, True):
        answer = report[f"infer(binary={binary})"]
        assert answer == {
            "id": f"kserve-{binary}",
            "x": [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]],
            "w": ["alpha", "beta"],
        }
    assert report["infer(ghost)"]["status"] == 404
    assert "unknown model 'ghost'" in report["infer(ghost)"]["message"]


def _inputs(module: object, binary: bool) -> list[object]:
    x = module.InferInput("x", list(VALUES.shape), "FP32")  # type: ignore[attr-defined]
    x.set_data_from_numpy(VALUES, binary_data=binary)
    w = module.InferInput("w", [len(WORDS)], "BYTES")  # type: ignore[attr-defined]
    w.set_data_from_numpy(WORDS, binary_data=binary)
    return [x, w]


def _outputs(module: object, binary: bool) -> list[object]:
    return [module.InferRequestedOutput(n, binary_data=binary) for n in ("x", "w")]  # type: ignore[attr-defined]


COMPRESSIONS = [
    (None, None),
    ("gzip", None),
    ("deflate", None),
    (None, "gzip"),
    ("gzip", "deflate"),
]


def test_tritonclient_http_sync(fixture_server: LiveServer) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url=fixture_server.url.removeprefix("http://"))
    try:
        assert client.is_server_live()
        assert client.is_server_ready()
        assert client.is_model_ready("echo")
        assert client.is_model_ready("scorer", "1")
        assert not client.is_model_ready("scorer", "3")
        assert client.get_server_metadata()["name"] == "servinglib"
        assert client.get_model_metadata("scorer", "1")["versions"] == ["1", "2"]
        config = client.get_model_config("echo")
        assert (config["backend"], config["max_batch_size"]) == ("python", 0)
        for binary in (False, True):
            for request_coding, response_coding in COMPRESSIONS:
                result = client.infer(
                    "echo",
                    _inputs(httpclient, binary),
                    outputs=_outputs(httpclient, binary),
                    request_id=f"sync-{binary}-{request_coding}-{response_coding}",
                    request_compression_algorithm=request_coding,
                    response_compression_algorithm=response_coding,
                )
                np.testing.assert_array_equal(result.as_numpy("x"), VALUES)
                assert _as_bytes(result.as_numpy("w")) == list(WORDS)
                assert result.get_response()["id"].startswith(f"sync-{binary}")
        for version in ("1", "2"):
            assert client.get_model_metadata("scorer", version)["name"] == "scorer"
        answer = client.infer("echo", _inputs(httpclient, True), model_version="1")
        assert answer.get_response()["model_version"] == "1"
        np.testing.assert_array_equal(answer.as_numpy("x"), VALUES)
        with pytest.raises(httpclient.InferenceServerException, match="version '9'"):
            client.infer("echo", _inputs(httpclient, False), model_version="9")
        with pytest.raises(httpclient.InferenceServerException, match="unknown model"):
            client.infer("ghost", _inputs(httpclient, False))
    finally:
        client.close()


def test_tritonclient_http_aio(fixture_server: LiveServer) -> None:
    import tritonclient.http.aio as aioclient

    async def drive() -> None:
        client = aioclient.InferenceServerClient(url=fixture_server.url.removeprefix("http://"))
        try:
            assert await client.is_server_live()
            assert await client.is_server_ready()
            assert await client.is_model_ready("echo")
            assert not await client.is_model_ready("scorer", "4")
            assert (await client.get_server_metadata())["name"] == "servinglib"
            assert (await client.get_model_metadata("echo"))["name"] == "echo"
            assert (await client.get_model_config("echo"))["name"] == "echo"
            for binary in (False, True):
                for request_coding, response_coding in COMPRESSIONS:
                    result = await client.infer(
                        "echo",
                        _inputs(aioclient, binary),
                        outputs=_outputs(aioclient, binary),
                        request_compression_algorithm=request_coding,
                        response_compression_algorithm=response_coding,
                    )
                    np.testing.assert_array_equal(result.as_numpy("x"), VALUES)
                    assert _as_bytes(result.as_numpy("w")) == list(WORDS)
            answer = await client.infer("echo", _inputs(aioclient, False), model_version="1")
            assert answer.get_response()["model_version"] == "1"
            np.testing.assert_array_equal(answer.as_numpy("x"), VALUES)
        finally:
            await client.close()

    asyncio.run(drive())
