"""The answer encoder: same JSON as the standard library, NumPy written natively, NaN refused."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from servinglib.wire import jsonbytes


@pytest.mark.parametrize(
    "value",
    [
        {"label": "malignant", "probability": 0.25, "ok": True, "none": None},
        {"ids": [1, 2, 3], "nested": {"a": [{"b": "c"}]}},
        {1: "int key", "s": "str key"},
        ("tuple", 1),
        "text with null inside",
    ],
)
def test_plain_values_encode_like_the_standard_library(value: object) -> None:
    expected = json.loads(json.dumps(jsonbytes.to_plain(value)))
    assert json.loads(jsonbytes.dumps(value)) == expected


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "uint64", "bool"])
def test_arrays_read_back_to_the_same_values_of_their_type(dtype: str) -> None:
    rng = np.random.default_rng(0)
    array = (rng.standard_normal((3, 5)) * 100).astype(dtype)
    decoded = np.asarray(json.loads(jsonbytes.dumps({"a": array}))["a"], dtype=dtype)
    assert decoded.tobytes() == array.tobytes()


def test_non_contiguous_arrays_scalars_and_bytes_are_written() -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4).T  # not C-contiguous
    value = {"t": array, "s": np.float32(1.5), "i": np.int64(7), "b": b"raw"}
    assert json.loads(jsonbytes.dumps(value)) == {
        "t": array.tolist(),
        "s": 1.5,
        "i": 7,
        "b": "raw",
    }


@pytest.mark.parametrize(
    "value",
    [
        {"score": math.nan},
        {"score": math.inf},
        {"v": np.array([1.0, np.nan], dtype=np.float32)},
        {"v": [1.0, -math.inf]},
        np.float64("nan"),
    ],
)
def test_nan_and_infinity_are_refused_not_written_as_null(value: object) -> None:
    with pytest.raises(jsonbytes.NonFiniteError):
        jsonbytes.dumps(value)


def test_objects_json_cannot_carry_raise_type_error_unless_a_default_converts_them() -> None:
    with pytest.raises(TypeError):
        jsonbytes.dumps({"x": object()})
    assert json.loads(jsonbytes.dumps({"x": {1, 2}}, default=sorted)) == {"x": [1, 2]}


def test_to_plain_keeps_arrays_of_numbers_as_python_lists() -> None:
    plain = jsonbytes.to_plain({"a": np.array([[1, 2]], dtype=np.int32), "b": (np.float32(2),)})
    assert plain == {"a": [[1, 2]], "b": [2.0]}
    assert type(plain["a"][0][0]) is int


@pytest.mark.parametrize(
    "value",
    [
        {"big": 69531477038413405745691230208, "negative": -(2**70)},
        {"lone surrogate \ud882": ["\udd9a", 1.5]},
        [2**64, float("1e300"), None],
    ],
)
def test_what_orjson_refuses_but_json_carries_is_still_written(value: object) -> None:
    """A request can hold these (the standard library parses them), so an echo must work."""
    assert json.loads(jsonbytes.dumps(value)) == value


def test_nan_next_to_a_big_integer_is_still_refused() -> None:
    with pytest.raises(jsonbytes.NonFiniteError):
        jsonbytes.dumps({"big": 2**70, "score": float("nan")})
