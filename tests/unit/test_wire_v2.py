"""servinglib.wire: every datatype through JSON and binary, and every malformed body."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from servinglib.errors import InvalidInputError, UnsupportedRequestError
from servinglib.wire.datatypes import datatype_of, numpy_dtype
from servinglib.wire.v2 import decode_request
from servinglib.wire.v2_response import encode_response

NUMERIC = {
    "BOOL": np.array([[True, False], [False, True]]),
    "UINT8": np.array([0, 255], dtype=np.uint8),
    "UINT16": np.array([0, 65535], dtype=np.uint16),
    "UINT32": np.array([0, 2**32 - 1], dtype=np.uint32),
    "UINT64": np.array([0, 2**64 - 1], dtype=np.uint64),
    "INT8": np.array([-128, 127], dtype=np.int8),
    "INT16": np.array([-(2**15), 2**15 - 1], dtype=np.int16),
    "INT32": np.array([-(2**31), 2**31 - 1], dtype=np.int32),
    "INT64": np.array([[-(2**63), 2**63 - 1, 7]], dtype=np.int64),
    "FP16": np.array([0.5, -65504.0, 1e-4], dtype=np.float16),
    "FP32": np.array([[1.5, -2.25], [3.4e38, 1e-38]], dtype=np.float32),
    "FP64": np.array([np.pi, -1e308, 5e-324], dtype=np.float64),
}


def binary_body(tensors: dict[str, np.ndarray]) -> tuple[bytes, int]:
    inputs, chunks = [], []
    for name, array in tensors.items():
        raw = array.astype(array.dtype.newbyteorder("<")).tobytes()
        inputs.append(
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": name,
                "parameters": {"binary_data_size": len(raw)},
            }
        )
        chunks.append(raw)
    header = json.dumps({"inputs": inputs}).encode()
    return header + b"".join(chunks), len(header)


@pytest.mark.parametrize("datatype", sorted(NUMERIC))
def test_json_round_trip_is_exact(datatype: str) -> None:
    array = NUMERIC[datatype]
    body = json.dumps(
        {
            "id": "r1",
            "inputs": [
                {
                    "name": "t",
                    "shape": list(array.shape),
                    "datatype": datatype,
                    "data": array.tolist(),
                }
            ],
        }
    )
    request = decode_request(body.encode(), None)
    decoded = request.inputs["t"]
    assert decoded.dtype == array.dtype
    assert decoded.shape == array.shape
    np.testing.assert_array_equal(decoded, array)
    payload, json_length = encode_response(
        "m",
        version="1",
        request_id=request.id,
        outputs={"t": decoded},
        requested=None,
        binary_default=False,
    )
    assert json_length is None
    out = json.loads(payload)
    assert out["id"] == "r1"
    (tensor,) = out["outputs"]
    assert {k: tensor[k] for k in ("name", "datatype", "shape")} == {
        "name": "t",
        "datatype": datatype,
        "shape": list(array.shape),
    }
    # Floats are written in the shortest form that reads back to the same value of the
    # tensor's own type (float16/32), so compare in that type, bit for bit.
    data = np.asarray(tensor["data"], dtype=array.dtype).reshape(array.shape)
    np.testing.assert_array_equal(data, array)
    assert data.tobytes() == array.tobytes()


def test_binary_round_trip_of_every_numeric_datatype_is_bit_exact() -> None:
    body, header_length = binary_body(NUMERIC)
    request = decode_request(body, header_length)
    for name, array in NUMERIC.items():
        assert request.inputs[name].dtype == array.dtype
        assert request.inputs[name].tobytes() == array.tobytes()
    payload, json_length = encode_response(
        "m",
        version="1",
        request_id=None,
        outputs=request.inputs,
        requested=None,
        binary_default=True,
    )
    assert json_length is not None
    header = json.loads(payload[:json_length])
    offset = json_length
    for tensor in header["outputs"]:
        size = tensor["parameters"]["binary_data_size"]
        expected = NUMERIC[tensor["name"]]
        assert tensor["datatype"] == tensor["name"]
        assert (
            payload[offset : offset + size]
            == expected.astype(expected.dtype.newbyteorder("<")).tobytes()
        )
        offset += size
    assert offset == len(payload)


def test_bytes_tensors_in_json_and_binary() -> None:
    strings = ["", "héllo", "a\x00b"]
    raw = b"".join(struct.pack("<I", len(s.encode())) + s.encode() for s in strings)
    header = json.dumps(
        {
            "inputs": [
                {"name": "j", "shape": [3], "datatype": "BYTES", "data": strings},
                {
                    "name": "b",
                    "shape": [1, 3],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(raw)},
                },
            ],
            "outputs": [{"name": "j", "parameters": {"binary_data": True}}, {"name": "b"}],
        }
    ).encode()
    request = decode_request(header + raw, len(header))
    assert list(request.inputs["j"]) == [s.encode() for s in strings]
    assert request.inputs["b"].shape == (1, 3)
    payload, json_length = encode_response(
        "m",
        version="1",
        request_id=None,
        outputs=request.inputs,
        requested=request.outputs,
        binary_default=False,
    )
    assert json_length is not None
    head = json.loads(payload[:json_length])
    assert [o["name"] for o in head["outputs"]] == ["j", "b"]
    assert head["outputs"][1]["data"] == strings
    assert payload[json_length:] == raw


def test_bf16_is_decoded_to_fp32_exactly() -> None:
    values = np.array([1.0, -2.5, 3.140625], dtype=np.float32)
    raw = (values.view(np.uint32) >> 16).astype("<u2").tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [3],
                    "datatype": "BF16",
                    "parameters": {"binary_data_size": len(raw)},
                }
            ]
        }
    ).encode()
    np.testing.assert_array_equal(decode_request(header + raw, len(header)).inputs["x"], values)


def test_nested_and_flat_json_data_are_both_accepted() -> None:
    for data in ([[1, 2], [3, 4]], [1, 2, 3, 4]):
        body = json.dumps(
            {"inputs": [{"name": "x", "shape": [2, 2], "datatype": "INT32", "data": data}]}
        )
        np.testing.assert_array_equal(
            decode_request(body.encode(), None).inputs["x"], [[1, 2], [3, 4]]
        )


def test_python_outputs_get_a_datatype() -> None:
    payload, _ = encode_response(
        "m",
        version="2",
        request_id=None,
        outputs={"p": 0.5, "label": ["a", "b"], "n": [1, 2], "ok": True},
        requested=None,
        binary_default=False,
    )
    out = {o["name"]: o for o in json.loads(payload)["outputs"]}
    assert (out["p"]["datatype"], out["p"]["shape"], out["p"]["data"]) == ("FP64", [1], [0.5])
    assert (out["label"]["datatype"], out["label"]["data"]) == ("BYTES", ["a", "b"])
    assert out["n"]["datatype"] == "INT64"
    assert out["ok"]["datatype"] == "BOOL"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"inputs": []}, "non-empty list"),
        (
            {"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2]}]},
            "2 values for shape",
        ),
        (
            {"inputs": [{"name": "x", "shape": [1], "datatype": "FLOAT", "data": [1]}]},
            "datatype 'FLOAT'",
        ),
        (
            {"inputs": [{"name": "x", "shape": [1], "datatype": "INT32", "data": [1.5]}]},
            "must be integers",
        ),
        (
            {"inputs": [{"name": "x", "shape": [1], "datatype": "INT8", "data": [300]}]},
            "out of range",
        ),
        (
            {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": ["1"]}]},
            "must be numbers",
        ),
        ({"inputs": [{"name": "x", "shape": [1], "datatype": "BOOL", "data": [1]}]}, "true/false"),
        (
            {"inputs": [{"name": "x", "shape": [-1], "datatype": "FP32", "data": [1]}]},
            "integers >= 0",
        ),
        ({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32"}]}, "neither `data`"),
        (
            {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}] * 2},
            "appears twice",
        ),
        (
            {
                "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
                "outputs": [{"name": "x", "parameters": {"classification": 2}}],
            },
            "classification",
        ),
        (
            {"inputs": [{"name": "x", "shape": [2**20, 2**20], "datatype": "FP32", "data": [1]}]},
            "more than",
        ),
        (  # no element, but NumPy cannot lay the shape out (its product passes 2**63)
            {
                "inputs": [
                    {"name": "x", "shape": [4096] * 6 + [0], "datatype": "UINT32", "data": []}
                ]
            },
            "counting every dimension other than 0",
        ),
        (
            {"inputs": [{"name": "x", "shape": [0, 5000, 5000], "datatype": "FP32", "data": []}]},
            "more than",
        ),
        ([1, 2], "JSON object"),
    ],
)
def test_malformed_requests_are_named(body: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        decode_request(json.dumps(body).encode(), None)


def test_classification_is_reported_as_unsupported() -> None:
    body = {
        "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
        "outputs": [{"name": "x", "parameters": {"classification": 2}}],
    }
    with pytest.raises(UnsupportedRequestError):
        decode_request(json.dumps(body).encode(), None)


def test_binary_framing_errors() -> None:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [2],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 8},
                }
            ]
        }
    ).encode()
    with pytest.raises(InvalidInputError, match="only 4 remain"):
        decode_request(header + b"\0" * 4, len(header))
    with pytest.raises(InvalidInputError, match="not claimed"):
        decode_request(header + b"\0" * 12, len(header))
    with pytest.raises(InvalidInputError, match="Inference-Header-Content-Length is 9999"):
        decode_request(header, 9999)
    bad_size = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [3],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 8},
                }
            ]
        }
    ).encode()
    with pytest.raises(InvalidInputError, match="expected 12"):
        decode_request(bad_size + b"\0" * 8, len(bad_size))
    truncated = json.dumps(
        {
            "inputs": [
                {
                    "name": "s",
                    "shape": [1],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": 6},
                }
            ]
        }
    ).encode()
    with pytest.raises(InvalidInputError, match="truncated"):
        decode_request(truncated + struct.pack("<I", 10) + b"ab", len(truncated))


def test_unknown_requested_output() -> None:
    with pytest.raises(InvalidInputError, match="no output"):
        encode_response(
            "m",
            version="1",
            request_id=None,
            outputs={"y": [1]},
            requested=decode_request(
                json.dumps(
                    {
                        "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
                        "outputs": [{"name": "z"}],
                    }
                ).encode(),
                None,
            ).outputs,
            binary_default=False,
        )


@pytest.mark.parametrize(
    ("datatype", "dtype"),
    [
        ("FP32", "float32"),
        ("INT64", "int64"),
        ("BOOL", "bool"),
        ("BYTES", "object"),
        ("BF16", "float32"),
        ("UINT16", "uint16"),
    ],
)
def test_one_datatype_table_gives_dtypes_both_ways(datatype: str, dtype: str) -> None:
    assert numpy_dtype(datatype) == np.dtype(dtype)
    if datatype != "BF16":  # served as FP32
        assert datatype_of(np.zeros(1, dtype=numpy_dtype(datatype))) == datatype
    with pytest.raises(TypeError, match="no Open Inference datatype"):
        datatype_of(np.zeros(1, dtype=np.complex64))


def test_an_empty_id_counts_as_none_as_triton_treats_it() -> None:
    # perf_analyzer sends "id": "" with every request
    body = {"id": "", "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}
    decoded = decode_request(json.dumps(body).encode(), None, max_elements=10, max_depth=8)
    assert decoded.id is None


def test_integer_data_written_with_a_zero_fraction_is_an_integer() -> None:
    """JSON Schema (and so the OpenAPI document) counts 2.0 as an integer; so does the server."""
    body = {"inputs": [{"name": "ids", "shape": [2], "datatype": "INT64", "data": [101, 2.0]}]}
    decoded = decode_request(json.dumps(body).encode(), None)
    assert decoded.inputs["ids"].tolist() == [101, 2]
    assert decoded.inputs["ids"].dtype == np.int64
    cases = ((2.5, "must be integers"), (None, "must be integers"), (1e300, "out of range"))
    for bad, message in cases:
        body["inputs"][0]["data"] = [101, bad]
        with pytest.raises(InvalidInputError, match=message):
            decode_request(json.dumps(body).encode(), None)
