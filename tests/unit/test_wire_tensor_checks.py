"""servinglib.wire.tensor_checks and the strict JSON parser: hostile tensors get a 400."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from servinglib.errors import InvalidInputError
from servinglib.runtimes._tensors import to_arrays
from servinglib.wire.strict_json import parse_json
from servinglib.wire.tensor_checks import (
    check_datatype,
    check_declared_datatype,
    check_finite,
    check_shape,
    element_count,
)
from servinglib.wire.v2 import MAX_ID_LENGTH, decode_request


def tensor(**fields: object) -> bytes:

    base = {"name": "a", "shape": [1], "datatype": "FP32", "data": [1.0]}
    return json.dumps({"inputs": [{**base, **fields}]}).encode()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (tensor(datatype={}), "datatype 'dict' is not one of"),
        (tensor(datatype=["FP32"]), "datatype 'list' is not one of"),
        (tensor(shape=[0, 10**20], data=[]), "has a dimension of 100000000000000000000"),
        (tensor(shape=[2**40, 2**40], data=[]), "has a dimension of"),
        (tensor(shape=[4096, 4096, 4096], data=[]), "more than 16777216 elements"),
        (tensor(data=[1e300]), "NaN or Infinity"),
        (tensor(datatype="BYTES", data=["ok"]).replace(b'"ok"', b'"\\ud800"'), "surrogate"),
        (tensor().replace(b"1.0", b"9" * 400), "64-bit float"),
        (tensor().replace(b'"a"', b'"\xed\xa0\x80"'), "not valid UTF-8"),
        (tensor().replace(b'"a"', b'"\xff"'), "not valid JSON"),
    ],
)
def test_hostile_json_tensors_are_refused_with_the_reason(body: bytes, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        decode_request(body, None)


def binary_request(datatype: str, raw: bytes, shape: list[int]) -> tuple[bytes, int]:

    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "a",
                    "shape": shape,
                    "datatype": datatype,
                    "parameters": {"binary_data_size": len(raw)},
                }
            ]
        }
    ).encode()
    return header + raw, len(header)


@pytest.mark.parametrize(
    ("datatype", "raw"),
    [
        ("FP32", struct.pack("<ff", 1.0, float("nan"))),
        ("FP64", struct.pack("<dd", float("inf"), 0.0)),
        ("FP16", np.array([1.0, np.inf], dtype="<f2").tobytes()),
        ("BF16", struct.pack("<HH", 0x3F80, 0x7FC0)),  # 1.0, NaN
    ],
)
def test_binary_tensors_obey_the_finite_number_rule(datatype: str, raw: bytes) -> None:
    body, length = binary_request(datatype, raw, [2])
    with pytest.raises(InvalidInputError, match="NaN or Infinity"):
        decode_request(body, length)


def test_finite_binary_tensors_still_decode() -> None:
    body, length = binary_request("FP32", struct.pack("<ff", 1.0, -2.5), [2])
    assert decode_request(body, length).inputs["a"].tolist() == [1.0, -2.5]


@pytest.mark.parametrize(
    "request_id",
    ["x" * (MAX_ID_LENGTH + 1), "line\nbreak", "nul\x00", 7, ["a"]],
)
def test_the_request_id_is_bounded_and_printable(request_id: object) -> None:

    body = json.loads(tensor())
    body["id"] = request_id
    with pytest.raises(InvalidInputError, match="`id`"):
        decode_request(json.dumps(body).encode(), None)


def test_a_printable_request_id_is_kept() -> None:

    body = json.loads(tensor())
    body["id"] = "req 42/a:b"
    assert decode_request(json.dumps(body).encode(), None).id == "req 42/a:b"


def test_a_declared_datatype_is_enforced_without_a_silent_cast() -> None:
    with pytest.raises(InvalidInputError, match="has datatype INT64; the model declares FP32"):
        check_declared_datatype("m", "x", "FP32", np.array([1, 2], dtype=np.int64))
    with pytest.raises(InvalidInputError, match="has datatype BYTES; the model declares FP64"):
        check_declared_datatype("m", "x", "FP64", np.array([b"a"], dtype=object))
    check_declared_datatype("m", "x", "FP32", np.array([1.0], dtype=np.float32))
    check_declared_datatype("m", "x", "BF16", np.array([1.0], dtype=np.float32))


def test_shape_datatype_and_finiteness_checks_directly() -> None:
    assert check_shape([2, 3.0], "t") == (2, 3)
    assert check_shape([0, 5], "t") == (0, 5)
    for bad in ["2", [True], [-1], [1.5], None]:
        with pytest.raises(InvalidInputError, match="integers >= 0"):
            check_shape(bad, "t")
    with pytest.raises(InvalidInputError, match="dimensions; at most 32"):
        check_shape([1] * 33, "t")
    assert element_count([2**40, 2**40, 2**40]) == 1 << 64
    assert check_datatype("INT8", "t") == "INT8"
    check_finite(np.array([1, 2]), "t")  # integers are always finite
    check_finite(np.array([], dtype=np.float32), "t")


def test_strict_json_refuses_what_only_the_standard_library_accepts() -> None:
    for raw in [
        b'"\\udc00"',
        '"\ud800"'.encode("utf-8", "surrogatepass"),
        '{"a": 1}'.encode("utf-16"),
    ]:
        with pytest.raises(InvalidInputError):
            parse_json(raw, 10)
    assert parse_json(b'{"a": [1, 2.5, "\\u00e9"]}', 10) == {"a": [1, 2.5, "\u00e9"]}


def test_runtime_models_refuse_features_that_overflow_their_dtype() -> None:
    dtypes = {"x": np.dtype(np.float32)}
    with pytest.raises(InvalidInputError, match="NaN or Infinity") as caught:
        to_arrays("digits", {"x": [1.0, 1e300]}, dtypes)
    assert caught.value.field == "x"
    assert to_arrays("digits", {"x": [1e30]}, dtypes)["x"].tolist() == [pytest.approx(1e30)]
