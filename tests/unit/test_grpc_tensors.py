"""gRPC tensors: ModelInferRequest -> the v2 request object, outputs -> ModelInferResponse."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from servinglib.errors import InvalidInputError, UnsupportedRequestError
from servinglib.grpc_front.proto import inference_pb2 as pb
from servinglib.grpc_front.tensors import decode_infer, encode_infer
from servinglib.wire.v2 import RequestedOutput

LIMIT = 1 << 20


def _raw(name: str, array: np.ndarray, datatype: str) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="echo", id="r-1")
    request.inputs.add(name=name, datatype=datatype, shape=array.shape)
    request.raw_input_contents.append(array.astype(array.dtype.newbyteorder("<")).tobytes())
    return request


@pytest.mark.parametrize(
    ("datatype", "array"),
    [
        ("FP32", np.array([[1.5, -2.0]], dtype=np.float32)),
        ("FP16", np.array([0.5, 65504.0], dtype=np.float16)),
        ("INT64", np.array([-(2**63), 2**63 - 1], dtype=np.int64)),
        ("UINT8", np.array([0, 255], dtype=np.uint8)),
        ("BOOL", np.array([True, False])),
    ],
)
def test_raw_contents_decode_bit_exact(datatype: str, array: np.ndarray) -> None:
    decoded = decode_infer(_raw("x", array, datatype), max_elements=LIMIT)
    assert decoded.id == "r-1"
    got = decoded.inputs["x"]
    assert got.dtype == array.dtype
    assert got.tobytes() == array.tobytes()
    got[...] = 0  # writable: a model may change its input in place


def test_raw_bytes_elements_are_length_prefixed() -> None:
    request = pb.ModelInferRequest(model_name="echo")
    request.inputs.add(name="s", datatype="BYTES", shape=[2])
    request.raw_input_contents.append(b"".join(struct.pack("<I", len(v)) + v for v in (b"a", b"")))
    assert decode_infer(request, max_elements=LIMIT).inputs["s"].tolist() == [b"a", b""]


@pytest.mark.parametrize(
    ("datatype", "field", "values", "dtype"),
    [
        ("FP32", "fp32_contents", [1.5, 2.5], np.float32),
        ("FP64", "fp64_contents", [1e-300, 2.0], np.float64),
        ("INT8", "int_contents", [-128, 127], np.int8),
        ("INT64", "int64_contents", [-(2**63), 5], np.int64),
        ("UINT16", "uint_contents", [0, 65535], np.uint16),
        ("UINT64", "uint64_contents", [2**64 - 1, 0], np.uint64),
        ("BOOL", "bool_contents", [True, False], np.bool_),
        ("BYTES", "bytes_contents", [b"x", b"\xff"], object),
    ],
)
def test_typed_contents_decode(datatype: str, field: str, values: list, dtype: type) -> None:
    request = pb.ModelInferRequest(model_name="echo")
    tensor = request.inputs.add(name="x", datatype=datatype, shape=[1, 2])
    getattr(tensor.contents, field).extend(values)
    array = decode_infer(request, max_elements=LIMIT).inputs["x"]
    assert array.dtype == np.dtype(dtype)
    assert array.shape == (1, 2)
    assert array.reshape(-1).tolist() == values


def _refused(request: pb.ModelInferRequest, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        decode_infer(request, max_elements=LIMIT)


def test_lying_shapes_and_sizes_are_refused() -> None:
    _refused(_raw("x", np.zeros(3, np.float32), "FP32").__class__(), "at least one tensor")
    request = _raw("x", np.zeros(3, np.float32), "FP32")
    request.inputs[0].shape[:] = [4]
    _refused(request, r"12 binary bytes for shape \[4\] of FP32 \(expected 16\)")
    request = _raw("x", np.zeros(3, np.float32), "FP32")
    request.raw_input_contents.append(b"")
    _refused(request, "2 entries for 1 inputs")
    request = pb.ModelInferRequest(model_name="echo")
    request.inputs.add(name="x", datatype="FP32", shape=[3]).contents.fp32_contents.extend([1.0])
    _refused(request, r"1 values for shape \[3\] \(3 expected\)")
    request = pb.ModelInferRequest(model_name="echo")
    request.inputs.add(name="x", datatype="FP32", shape=[-1])
    _refused(request, "integers >= 0")
    request = pb.ModelInferRequest(model_name="echo")
    request.inputs.add(name="x", datatype="FP32", shape=[1 << 40, 1 << 40])
    _refused(request, "max_tensor_elements")


def test_wrong_datatypes_and_non_finite_values_are_refused() -> None:
    request = pb.ModelInferRequest(model_name="echo")
    request.inputs.add(name="x", datatype="FLOAT", shape=[1]).contents.fp32_contents.append(1)
    _refused(request, "datatype 'FLOAT' is not one of")
    request = pb.ModelInferRequest(model_name="echo")
    request.inputs.add(name="x", datatype="FP32", shape=[1]).contents.int64_contents.append(1)
    _refused(request, "belongs in contents.fp32_contents, not contents.int64_contents")
    request = pb.ModelInferRequest(model_name="echo")
    request.inputs.add(name="x", datatype="INT8", shape=[1]).contents.int_contents.append(300)
    _refused(request, "out of range for INT8")
    request = pb.ModelInferRequest(model_name="echo")
    request.inputs.add(name="x", datatype="FP16", shape=[1]).contents.fp32_contents.append(1)
    _refused(request, "FP16 has no typed contents")
    _refused(_raw("x", np.array([1.0, np.nan], np.float32), "FP32"), "NaN or Infinity")
    request = pb.ModelInferRequest(model_name="echo")
    request.inputs.add(name="x", datatype="FP64", shape=[1]).contents.fp64_contents.append(np.inf)
    _refused(request, "NaN or Infinity")


def test_mixed_raw_and_typed_and_duplicates_are_refused() -> None:
    request = _raw("x", np.zeros(1, np.float32), "FP32")
    request.inputs[0].contents.fp32_contents.append(0.0)
    _refused(request, "send every input one way")
    request = pb.ModelInferRequest(model_name="echo")
    for _ in range(2):
        request.inputs.add(name="x", datatype="BOOL", shape=[1]).contents.bool_contents.append(1)
    _refused(request, "appears twice")
    request = _raw("x", np.zeros(1, np.float32), "FP32")
    request.parameters["p"].CopyFrom(pb.InferParameter())
    _refused(request, r"request.parameters\['p'\] holds no value")
    request = _raw("x", np.zeros(1, np.float32), "FP32")
    request.id = "bad\nid"
    _refused(request, "printable")


def test_classification_outputs_are_unsupported() -> None:
    request = _raw("x", np.zeros(1, np.float32), "FP32")
    request.outputs.add(name="y").parameters["classification"].int64_param = 2
    with pytest.raises(UnsupportedRequestError, match="classification"):
        decode_infer(request, max_elements=LIMIT)


def test_encode_answers_raw_in_the_requested_order() -> None:
    request = _raw("x", np.zeros(1, np.float32), "FP32")
    request.outputs.add(name="b")
    request.outputs.add(name="a")
    request.parameters["priority"].int64_param = 1
    decoded = decode_infer(request, max_elements=LIMIT)
    assert decoded.outputs == (RequestedOutput("b", True), RequestedOutput("a", True))
    assert decoded.parameters == {"priority": 1}
    outputs = {"a": np.array([[1, 2]], np.int32), "b": [b"t", "\u00fc"], "c": 3.0}
    response = encode_infer("echo", "1", outputs, decoded)
    assert (response.model_name, response.model_version, response.id) == ("echo", "1", "r-1")
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
        ("b", "BYTES", [2]),
        ("a", "INT32", [1, 2]),
    ]
    assert response.raw_output_contents[1] == np.array([1, 2], "<i4").tobytes()
    assert response.raw_output_contents[0] == b"\x01\x00\x00\x00t\x02\x00\x00\x00\xc3\xbc"
    request.outputs.add(name="missing")
    with pytest.raises(InvalidInputError, match="no output"):
        encode_infer("echo", "1", outputs, decode_infer(request, max_elements=LIMIT))
