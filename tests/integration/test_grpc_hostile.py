"""Hostile gRPC traffic: malformed protobufs, lying shapes and sizes, huge declared tensors,
wrong datatypes, NaN. Every one gets its documented status (INVALID_ARGUMENT, NOT_FOUND,
RESOURCE_EXHAUSTED), never INTERNAL or UNKNOWN, and no worker dies."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from tests.conftest import SERVICE_CONFIG, stop, worker_pids
from tests.integration._tools_grpc import GrpcServer, launch_grpc, wait_until_answered

pytestmark = pytest.mark.integration

INFER = "/inference.GRPCInferenceService/ModelInfer"
LIMIT = 1 << 20  # server.max_request_body_bytes for this server: 1 MiB
OK, BAD, MISSING = grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcServer]:
    env = {"SERVINGLIB_MAX_REQUEST_BODY_BYTES": str(LIMIT)}
    grpc_server = launch_grpc(
        SERVICE_CONFIG, tmp_path_factory.mktemp("h"), "--workers", "2", env=env
    )
    yield grpc_server
    stop(grpc_server.live.process)


def _send(channel: grpc.Channel, body: bytes, method: str = INFER) -> grpc.StatusCode:
    call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    try:
        call(body, timeout=30)
    except grpc.RpcError as e:
        code: grpc.StatusCode = e.code()
        return code
    return OK


def _valid() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="echo", id="v")
    request.inputs.add(name="x", datatype="FP32", shape=[2, 2])
    request.raw_input_contents.append(np.ones(4, "<f4").tobytes())
    request.inputs.add(name="s", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(struct.pack("<I", 2) + b"hi")
    return request


def _crafted() -> list[tuple[str, pb.ModelInferRequest, grpc.StatusCode, str]]:
    cases = []

    def case(name: str, code: grpc.StatusCode, text: str) -> pb.ModelInferRequest:
        request = _valid()
        cases.append((name, request, code, text))
        return request

    case("shape says 3x2, bytes say 2x2", BAD, "expected 24").inputs[0].shape[:] = [3, 2]
    case("huge declared tensor", BAD, "max_tensor_elements").inputs[0].shape[:] = [2**31, 2**31]
    case("negative dimension", BAD, "integers >= 0").inputs[0].shape[:] = [-1, 4]
    case("40 dimensions", BAD, "dimensions").inputs[0].shape[:] = [1] * 40
    case("unknown datatype", BAD, "is not one of").inputs[0].datatype = "FP33"
    case("datatype that changes the size", BAD, "expected 32").inputs[0].datatype = "FP64"
    case("BYTES length past the end", BAD, "truncated").raw_input_contents[1] = (
        struct.pack("<I", 99) + b"hi"
    )
    case("NaN", BAD, "NaN or Infinity").raw_input_contents[0] = np.array(
        [1, np.nan, 1, 1], "<f4"
    ).tobytes()
    case("Infinity", BAD, "NaN or Infinity").raw_input_contents[0] = np.array(
        [1, 1, np.inf, 1], "<f4"
    ).tobytes()
    case("fewer raw entries than inputs", BAD, "2 inputs").raw_input_contents.pop()
    case("raw and typed at once", BAD, "one way").inputs[1].contents.bytes_contents.append(b"x")
    case("unnamed input", BAD, "non-empty").inputs[0].name = ""
    case("control characters in the id", BAD, "printable").id = "a\x00b"
    case("empty parameter", BAD, "holds no value").parameters["p"].CopyFrom(pb.InferParameter())
    case("unknown output", BAD, "no output").outputs.add(name="nope")
    case("unknown model", MISSING, "unknown model").model_name = "nope"
    case("unknown version", MISSING, "version").model_version = "7"
    typed = case("typed values of the wrong type", BAD, "belongs in contents.fp32_contents")
    del typed.raw_input_contents[:]
    typed.inputs[0].contents.int64_contents.extend([1, 2, 3, 4])
    typed.inputs[1].contents.bytes_contents.append(b"x")
    short = case("typed values short of the shape", BAD, "4 expected")
    del short.raw_input_contents[:]
    short.inputs[0].contents.fp32_contents.extend([1.0])
    short.inputs[1].contents.bytes_contents.append(b"x")
    return cases


def test_crafted_lies_get_their_documented_code(server: GrpcServer) -> None:
    with grpc.insecure_channel(server.grpc_address) as channel:
        assert _send(channel, _valid().SerializeToString()) == OK
        for name, request, code, text in _crafted():
            call = channel.unary_unary(INFER, request_serializer=None, response_deserializer=None)
            with pytest.raises(grpc.RpcError) as refused:
                call(request.SerializeToString(), timeout=30)
            assert refused.value.code() == code, (name, refused.value.details())
            assert text in (refused.value.details() or ""), (name, refused.value.details())


def test_fuzzed_bytes_never_get_internal_nor_kill_a_worker(server: GrpcServer) -> None:
    pids = worker_pids(server.live)
    rng = random.Random(29)
    valid = _valid().SerializeToString()
    codes: dict[grpc.StatusCode, int] = {}
    with grpc.insecure_channel(server.grpc_address) as channel:
        bodies = [rng.randbytes(rng.randint(1, 300)) for _ in range(150)]
        for _ in range(250):  # flipped bytes, cuts and splices of a valid request
            body = bytearray(valid)
            for _ in range(rng.randint(1, 4)):
                position = rng.randrange(len(body))
                kind = rng.random()
                if kind < 0.5:
                    body[position] = rng.randrange(256)
                elif kind < 0.75:
                    del body[position:]
                    body += valid[: rng.randrange(len(valid))]
                else:
                    body[position:position] = rng.randbytes(rng.randint(1, 8))
            bodies.append(bytes(body))
        for body in bodies:
            code = _send(channel, body)
            codes[code] = codes.get(code, 0) + 1
        metadata_code = _send(
            channel, b"\xff\xff\xff", "/inference.GRPCInferenceService/ModelMetadata"
        )
    print(f"figures: {len(bodies)} fuzzed requests -> { ({c.name: n for c, n in codes.items()}) }")
    assert set(codes) <= {OK, BAD, MISSING}, codes
    assert codes.get(BAD, 0) > 100
    assert metadata_code == BAD
    assert worker_pids(server.live) == pids  # no worker died or was replaced
    wait_until_answered(server)


def test_a_message_over_the_body_limit_is_resource_exhausted(server: GrpcServer) -> None:
    request = _valid()
    request.inputs[0].shape[:] = [LIMIT // 4 + 1]
    request.raw_input_contents[0] = np.zeros(LIMIT // 4 + 1, "<f4").tobytes()
    with grpc.insecure_channel(server.grpc_address) as channel:
        assert _send(channel, request.SerializeToString()) == grpc.StatusCode.RESOURCE_EXHAUSTED
    wait_until_answered(server)


def test_a_malformed_message_on_a_stream_answers_that_request_only(server: GrpcServer) -> None:
    valid = _valid().SerializeToString()
    with grpc.insecure_channel(server.grpc_address) as channel:
        stream = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=None,
            response_deserializer=pb.ModelStreamInferResponse.FromString,
        )
        answers = list(stream(iter([valid, b"\xff\x01garbage", valid]), timeout=30))
    assert [bool(a.error_message) for a in answers] == [False, True, False]
    assert "not valid protobuf" in answers[1].error_message
    assert answers[2].infer_response.outputs[0].name == "x"
