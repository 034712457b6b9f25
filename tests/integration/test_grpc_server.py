"""Open Inference over gRPC against a real ``servinglib serve --workers 2``: Triton's own
client (sync and asyncio), the standard health service, and the REST path's refusals."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as triton
import tritonclient.grpc.aio as triton_aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.conftest import SERVICE_CONFIG, stop
from tests.integration._tools_grpc import GrpcServer, launch_grpc

pytestmark = pytest.mark.integration

TENSORS = {
    "BOOL": np.array([[True, False, True]]),
    "UINT8": np.array([0, 7, 255], dtype=np.uint8),
    "UINT64": np.array([2**64 - 1], dtype=np.uint64),
    "INT8": np.array([-128, 127], dtype=np.int8),
    "INT32": np.array([[-(2**31)], [2**31 - 1]], dtype=np.int32),
    "INT64": np.array([-(2**63), 2**63 - 1], dtype=np.int64),
    "FP16": np.array([0.1, 65504.0, -0.0], dtype=np.float16),
    "FP32": np.array([[np.pi, -1e-30], [3.4e38, 0.5]], dtype=np.float32),
    "FP64": np.array([np.e, 1e-300, -1.7976931348623157e308]),
    "BYTES": np.array([b"", b"plain", "\u00fc\u2713".encode(), b"\xff\x00"], dtype=object),
}


@pytest.fixture(scope="module")
def grpc_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcServer]:
    server = launch_grpc(SERVICE_CONFIG, tmp_path_factory.mktemp("grpc"), "--workers", "2")
    yield server
    stop(server.live.process)


@pytest.fixture
def client(grpc_server: GrpcServer) -> Iterator[triton.InferenceServerClient]:
    with triton.InferenceServerClient(grpc_server.grpc_address) as c:
        yield c


def _inputs(tensors: dict[str, np.ndarray]) -> list[triton.InferInput]:
    inputs = []
    for name, array in tensors.items():
        tensor = triton.InferInput(name, list(array.shape), name)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def test_raw_contents_round_trip_bit_exact(client: triton.InferenceServerClient) -> None:
    result = client.infer("echo", _inputs(TENSORS), request_id="raw-1")
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == ("echo", "1", "raw-1")
    for name, array in TENSORS.items():
        got = result.as_numpy(name)
        assert got.shape == array.shape, name
        if name == "BYTES":
            assert got.tolist() == array.tolist()
        else:
            assert got.dtype == array.dtype, name
            assert got.tobytes() == array.tobytes(), name


def test_typed_contents_with_tritons_own_stub(grpc_server: GrpcServer) -> None:
    request = service_pb2.ModelInferRequest(model_name="echo", id="typed")
    request.inputs.add(name="f", datatype="FP32", shape=[2]).contents.fp32_contents.extend(
        [1.5, -2.0]
    )
    request.inputs.add(name="i", datatype="INT16", shape=[1, 2]).contents.int_contents.extend(
        [-3, 32767]
    )
    request.inputs.add(name="s", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"hi")
    request.inputs.add(name="b", datatype="BOOL", shape=[1]).contents.bool_contents.append(True)
    request.outputs.add(name="i")
    request.outputs.add(name="f")
    with grpc.insecure_channel(grpc_server.grpc_address) as channel:
        response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
        ("i", "INT16", [1, 2]),
        ("f", "FP32", [2]),
    ]
    assert response.raw_output_contents[0] == np.array([-3, 32767], "<i2").tobytes()
    assert response.raw_output_contents[1] == np.array([1.5, -2.0], "<f4").tobytes()


def test_health_metadata_config_and_index(
    grpc_server: GrpcServer, client: triton.InferenceServerClient
) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("scorer", "2")
    assert not client.is_model_ready("scorer", "3")  # its load failed
    metadata = client.get_server_metadata(as_json=True)
    assert metadata["name"] == "servinglib"
    assert "model_configuration" in metadata["extensions"]
    model = client.get_model_metadata("scorer", as_json=True)
    assert (model["name"], model["versions"]) == ("scorer", ["1", "2"])
    config = client.get_model_config("scorer", as_json=True)["config"]
    assert config["name"] == "scorer"
    assert config["backend"] == "python"
    assert config["parameters"]["servinglib_default_version"]["string_value"] == "2"
    rest = requests.get(f"{grpc_server.url}/v2/models/scorer/config", timeout=10).json()
    versions = config["version_policy"]["specific"]["versions"]  # int64: strings in JSON
    assert [int(v) for v in versions] == rest["version_policy"]["specific"]["versions"]
    index = client.get_model_repository_index(as_json=True)["models"]
    states = {(m["name"], m["version"]): m["state"] for m in index}
    assert states[("scorer", "3")] == "FAILED"
    assert states[("echo", "1")] == "READY"
    assert any("corrupt" in m.get("reason", "") for m in index)


def test_statistics_count_every_worker(client: triton.InferenceServerClient) -> None:
    before = client.get_inference_statistics("whoami", "1", as_json=True)["model_stats"][0]
    done_before = int(before["inference_stats"]["success"].get("count", 0))
    x = _inputs({"FP32": np.zeros(1, np.float32)})
    for _ in range(12):
        client.infer("whoami", x)
    stats = client.get_inference_statistics("whoami", as_json=True)["model_stats"]
    assert [(s["name"], s["version"]) for s in stats] == [("whoami", "1")]
    success = stats[0]["inference_stats"]["success"]
    assert int(success["count"]) == done_before + 12
    assert int(success["ns"]) > 0
    everything = client.get_inference_statistics(as_json=True)["model_stats"]
    assert {s["name"] for s in everything} == {"scorer", "echo", "whoami"}


def test_stream_infer_answers_every_request_in_order(client: triton.InferenceServerClient) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i in range(20):
            x = _inputs({"INT64": np.array([i], np.int64)})
            if i == 7:
                client.async_stream_infer("nope", x, request_id="bad")
            else:
                client.async_stream_infer("echo", x, request_id=f"s-{i}")
        got = [answers.get(timeout=30) for _ in range(20)]
    finally:
        client.stop_stream()
    errors = [error for _, error in got if error is not None]
    assert len(errors) == 1
    assert "unknown model 'nope'" in str(errors[0])
    values = [int(result.as_numpy("INT64")[0]) for result, error in got if error is None]
    assert values == [i for i in range(20) if i != 7]


def test_asyncio_client(grpc_server: GrpcServer) -> None:
    async def scenario() -> None:
        async with triton_aio.InferenceServerClient(grpc_server.grpc_address) as aio:
            assert await aio.is_server_ready()
            assert await aio.is_model_ready("echo")
            assert (await aio.get_model_metadata("echo", as_json=True))["name"] == "echo"
            assert (await aio.get_model_config("echo", as_json=True))["config"]["name"] == "echo"
            index = await aio.get_model_repository_index(as_json=True)
            assert len(index["models"]) == 6
            stats = await aio.get_inference_statistics("echo", as_json=True)
            assert stats["model_stats"][0]["name"] == "echo"
            x = _inputs({"FP64": np.array([1.0, 2.0])})
            results = await asyncio.gather(*(aio.infer("echo", x) for _ in range(16)))
            assert all(r.as_numpy("FP64").tolist() == [1.0, 2.0] for r in results)

            async def requests_() -> Any:
                for i in range(5):
                    yield {
                        "model_name": "echo",
                        "inputs": _inputs({"INT32": np.array([i], np.int32)}),
                        "request_id": str(i),
                    }

            streamed = [r async for r in aio.stream_infer(requests_())]
            assert [int(r.as_numpy("INT32")[0]) for r, _ in streamed] == list(range(5))

    asyncio.run(scenario())


def test_grpc_health_service_follows_readiness(grpc_server: GrpcServer) -> None:
    with grpc.insecure_channel(grpc_server.grpc_address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "inference.GRPCInferenceService", "liveness"):
            answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as refused:
            stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=10)
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND


def _code(error: InferenceServerException) -> str:
    return str(error.status())


def test_errors_map_to_documented_codes(client: triton.InferenceServerClient) -> None:
    x = _inputs({"FP32": np.zeros(1, np.float32)})
    cases = [
        (lambda: client.infer("nope", x), "StatusCode.NOT_FOUND", "unknown model 'nope'"),
        (lambda: client.infer("scorer", x, "9"), "StatusCode.NOT_FOUND", "version"),
        (lambda: client.infer("scorer", x, "3"), "StatusCode.UNAVAILABLE", "FAILED"),
        (lambda: client.get_model_metadata("nope"), "StatusCode.NOT_FOUND", "unknown model"),
        (lambda: client.is_model_ready("nope"), "StatusCode.NOT_FOUND", "unknown model"),
        (
            lambda: client.infer("echo", _inputs({"FP32": np.array([np.nan], np.float32)})),
            "StatusCode.INVALID_ARGUMENT",
            "NaN or Infinity",
        ),
    ]
    for call, code, text in cases:
        with pytest.raises(InferenceServerException) as refused:
            call()
        assert _code(refused.value) == code, refused.value
        assert text in refused.value.message(), refused.value


def test_a_model_error_is_internal_with_an_error_id(grpc_server: GrpcServer) -> None:
    request = service_pb2.ModelInferRequest(model_name="scorer")
    request.inputs.add(name="x", datatype="FP64", shape=[1]).contents.fp64_contents.append(1.0)
    request.inputs.add(name="explode", datatype="BOOL", shape=[]).contents.bool_contents.append(
        True
    )
    with grpc.insecure_channel(grpc_server.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as failed:
            stub.ModelInfer(request, timeout=10)
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    assert "error id" in (failed.value.details() or "")


def test_request_id_and_version_come_back_as_trailers(grpc_server: GrpcServer) -> None:
    request = service_pb2.ModelInferRequest(model_name="echo")
    request.inputs.add(name="x", datatype="BOOL", shape=[1]).contents.bool_contents.append(True)
    with grpc.insecure_channel(grpc_server.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        answer, call = stub.ModelInfer.with_call(
            request, timeout=5, metadata=[("x-request-id", "dl-1")]
        )
    trailers = dict(call.trailing_metadata())
    assert trailers["x-request-id"] == "dl-1"
    assert trailers["x-servinglib-model-version"] == "1"
    assert answer.outputs[0].name == "x"


def test_gzip_requests_and_answers(client: triton.InferenceServerClient) -> None:
    big = np.arange(40_000, dtype=np.float64)  # 320 KB: over compress_min_bytes
    result = client.infer("echo", _inputs({"FP64": big}), compression_algorithm="gzip")
    assert result.as_numpy("FP64").tobytes() == big.tobytes()


def test_grpc_requests_are_counted_and_logged(
    grpc_server: GrpcServer, client: triton.InferenceServerClient
) -> None:
    client.infer("echo", _inputs({"INT8": np.array([1], np.int8)}), headers={"x-request-id": "m-1"})
    metrics = requests.get(f"{grpc_server.url}/metrics", timeout=10).text
    assert 'protocol="grpc"' in metrics
    assert any(
        line.startswith("servinglib_requests_total{")
        and 'model="echo"' in line
        and 'protocol="grpc"' in line
        and 'outcome="success"' in line
        for line in metrics.splitlines()
    )
    log = grpc_server.live.wait_for_log('"request_id": "m-1"')
    line = next(line for line in log.splitlines() if '"request_id": "m-1"' in line)
    assert '"protocol": "grpc"' in line
    assert '"/inference.GRPCInferenceService/ModelInfer"' in line
