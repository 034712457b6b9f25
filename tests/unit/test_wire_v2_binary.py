"""servinglib.wire: binary tensors, and the checked header layout kept for repeated headers.

Clients send the same JSON header with every binary request; its layout is checked once
and kept. These tests decode the same header again and again with other bytes after it,
and make sure nothing of one request leaks into the next and every refusal stays the same.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from servinglib.errors import InvalidInputError
from servinglib.wire import v2
from servinglib.wire.v2 import decode_request


def header(*tensors: tuple[str, str, list[int], int], **extra: object) -> bytes:
    """A binary request header: (name, datatype, shape, binary_data_size) per input."""
    inputs = [
        {"name": n, "datatype": d, "shape": s, "parameters": {"binary_data_size": size}}
        for n, d, s, size in tensors
    ]
    return json.dumps({"inputs": inputs, **extra}).encode()


def decode(head: bytes, *chunks: bytes) -> v2.InferRequest:
    return decode_request(head + b"".join(chunks), len(head))


def test_a_repeated_header_decodes_each_request_s_own_bytes() -> None:
    head = header(("ids", "INT64", [1, 3], 24), ("mask", "INT64", [1, 3], 24))
    for start in range(5):
        ids = np.arange(start, start + 3, dtype="<i8").reshape(1, 3)
        request = decode(head, ids.tobytes(), np.ones((1, 3), "<i8").tobytes())
        np.testing.assert_array_equal(request.inputs["ids"], ids)
        assert request.inputs["ids"].dtype == np.int64
        assert list(request.inputs) == ["ids", "mask"]
    assert any(key[0] == head for key in v2._LAYOUTS)


def test_arrays_are_writable_and_independent_of_the_next_request() -> None:
    head = header(("x", "FP32", [2], 8))
    first = decode(head, np.array([1, 2], "<f4").tobytes())
    first.inputs["x"][0] = 99.0  # a model may change its input in place
    second = decode(head, np.array([1, 2], "<f4").tobytes())
    assert second.inputs["x"].tolist() == [1.0, 2.0]
    assert first.inputs["x"].flags.writeable


def test_tensors_behind_a_narrower_one_are_aligned_and_exact() -> None:
    head = header(("h", "FP16", [3], 6), ("f", "FP32", [2], 8), ("i", "INT64", [1], 8))
    halves = np.array([0.5, 1.5, -2], "<f2")
    floats = np.array([3.25, -1e-3], "<f4")
    longs = np.array([2**62], "<i8")
    for _ in range(2):  # decoded, then from the kept layout
        request = decode(head, halves.tobytes(), floats.tobytes(), longs.tobytes())
        np.testing.assert_array_equal(request.inputs["h"], halves)
        np.testing.assert_array_equal(request.inputs["f"], floats)
        assert request.inputs["i"].tolist() == [2**62]
        assert all(array.flags.aligned for array in request.inputs.values())


def test_a_kept_layout_still_refuses_non_finite_data_the_same_way() -> None:
    head = header(("x", "FP32", [2], 8))
    decode(head, np.array([1, 2], "<f4").tobytes())
    messages = set()
    for _ in range(2):
        with pytest.raises(InvalidInputError, match="NaN or Infinity") as error:
            decode(head, np.array([1, np.nan], "<f4").tobytes())
        messages.add(str(error.value))
    assert len(messages) == 1


def test_a_kept_layout_refuses_a_body_of_another_length_as_a_new_header_would() -> None:
    head = header(("x", "INT32", [2], 8))
    decode(head, np.array([1, 2], "<i4").tobytes())
    with pytest.raises(InvalidInputError, match="declares 8 binary bytes but only 4 remain"):
        decode(head, np.array([1], "<i4").tobytes())
    with pytest.raises(InvalidInputError, match="4 bytes after the last binary tensor"):
        decode(head, np.array([1, 2, 3], "<i4").tobytes())


def test_bytes_and_bf16_through_a_kept_layout() -> None:
    words = [b"alpha", b"", "é".encode()]
    framed = b"".join(len(w).to_bytes(4, "little") + w for w in words)
    bf16 = (np.array([1.5, -2.0], "<f4").view("<u4") >> 16).astype("<u2")
    head = header(("t", "BYTES", [3], len(framed)), ("b", "BF16", [2], 4))
    for _ in range(2):
        request = decode(head, framed, bf16.tobytes())
        assert request.inputs["t"].tolist() == words
        assert request.inputs["b"].tolist() == [1.5, -2.0]
    misframed = framed[:-6] + (3).to_bytes(4, "little") + framed[-2:]  # claims 3 of 2 bytes
    with pytest.raises(InvalidInputError, match="BYTES element of 3 bytes is truncated"):
        decode(head, misframed, bf16.tobytes())


def test_id_outputs_and_parameters_come_from_the_header_they_were_sent_with() -> None:
    one = header(("x", "INT8", [1], 1), id="a", outputs=[{"name": "y"}])
    two = header(("x", "INT8", [1], 1), id="b", parameters={"priority": 1})
    for _ in range(2):
        first, second = decode(one, b"\x01"), decode(two, b"\x02")
        assert (first.id, second.id) == ("a", "b")
        assert first.outputs is not None
        assert [o.name for o in first.outputs] == ["y"]
        assert second.outputs is None
        assert second.parameters["priority"] == 1
        assert dict(first.parameters) == {}


def test_json_data_in_a_binary_body_is_never_kept() -> None:
    inputs = [
        {"name": "a", "datatype": "INT32", "shape": [1], "data": [7]},
        {"name": "b", "datatype": "INT32", "shape": [1], "parameters": {"binary_data_size": 4}},
    ]
    head = json.dumps({"inputs": inputs}).encode()
    for value in (1, 2):
        request = decode(head, np.array([value], "<i4").tobytes())
        assert request.inputs["a"].tolist() == [7]
        assert request.inputs["b"].tolist() == [value]
    assert not any(key[0] == head for key in v2._LAYOUTS)


def test_the_kept_layouts_stay_bounded() -> None:
    for i in range(3 * v2._LAYOUTS_MAX):
        decode(header(("x", "INT8", [1], 1), id=f"request-{i}"), b"\x00")
    assert len(v2._LAYOUTS) <= v2._LAYOUTS_MAX
