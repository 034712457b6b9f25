"""Decode Open Inference Protocol v2 requests: JSON tensors and the binary extension.

Binary tensor data extension (Triton/KServe): the body is a JSON header of
``Inference-Header-Content-Length`` bytes followed by raw tensor bytes, in the order of the
inputs whose ``parameters.binary_data_size`` is set. Numbers are little-endian, row-major;
BYTES elements are each a 4-byte little-endian length followed by the bytes.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from servinglib.errors import InvalidInputError, UnsupportedRequestError
from servinglib.wire.datatypes import DATATYPES, numpy_dtype
from servinglib.wire.strict_json import parse_json
from servinglib.wire.tensor_checks import (
    MAX_DIMENSIONS,
    MAX_ELEMENTS,
    check_datatype,
    check_finite,
    check_shape,
)
from servinglib.wire.v2_binary import BinaryTensor, binary_tensor, read_tensors
from servinglib.wire.v2_binary import input_label as _where  # one way to name an input

__all__ = ["MAX_ID_LENGTH", "InferRequest", "RequestedOutput", "decode_request"]

MAX_ID_LENGTH = 256
_ID_PATTERN = re.compile(rf"[\x20-\x7e]{{1,{MAX_ID_LENGTH}}}")


@dataclass(frozen=True)
class RequestedOutput:
    """An entry of the request's ``outputs`` list."""

    name: str
    binary: bool


@dataclass(frozen=True)
class InferRequest:
    """A decoded v2 inference request."""

    id: str | None
    inputs: dict[str, np.ndarray]
    outputs: tuple[RequestedOutput, ...] | None
    binary_output_default: bool
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class _Layout:
    """A binary request's JSON header, checked: everything but the tensors' bytes."""

    id: str | None
    tensors: tuple[BinaryTensor, ...]
    size: int  # binary bytes after the header
    outputs: tuple[RequestedOutput, ...] | None
    binary_output_default: bool
    parameters: Mapping[str, Any]

    def request(self, body: bytes, start: int) -> InferRequest:
        """The request whose tensors are ``body``'s bytes after ``start``."""
        inputs = read_tensors(body, start, self.tensors)
        return InferRequest(
            self.id, inputs, self.outputs, self.binary_output_default, self.parameters
        )


_PENDING = np.empty(0)  # an input's place in the dict until its bytes are read

# Clients send the same JSON header with every binary request (names, shapes, datatypes;
# only the bytes after it change), so its checked layout is kept, keyed by its bytes and
# the limits it was checked under: a repeated header costs one dictionary lookup. Bounded:
# headers up to 4 KiB, at most 256 of them (then the cache starts again).
_LAYOUTS: dict[tuple[bytes, int, int], _Layout] = {}
_LAYOUTS_MAX = 256
_LAYOUT_HEADER_MAX_BYTES = 4096
_layouts_lock = threading.Lock()


def decode_request(
    body: bytes,
    header_length: int | None,
    *,
    max_elements: int = MAX_ELEMENTS,
    max_depth: int = 64,
) -> InferRequest:
    """Parse a v2 infer body (JSON, or JSON header + binary tensors).

    Raises:
        InvalidInputError: the body does not follow the protocol; the message says where.
    """
    if header_length is None or not 0 <= header_length <= _LAYOUT_HEADER_MAX_BYTES:
        return _decode(body, header_length, max_elements, max_depth)[0]
    key = (body[:header_length], max_elements, max_depth)
    layout = _LAYOUTS.get(key)
    if layout is not None and len(body) - header_length == layout.size:
        return layout.request(body, header_length)
    request, layout = _decode(body, header_length, max_elements, max_depth)
    if layout is not None:
        with _layouts_lock:
            if len(_LAYOUTS) >= _LAYOUTS_MAX:
                _LAYOUTS.clear()
            _LAYOUTS[key] = layout
    return request


def _decode(
    body: bytes, header_length: int | None, max_elements: int, max_depth: int
) -> tuple[InferRequest, _Layout | None]:
    """The request, and its header's layout when every input is binary (None otherwise)."""
    if header_length is None:
        header_bytes, start = body, len(body)
    else:
        if header_length < 0 or header_length > len(body):
            raise InvalidInputError(
                f"Inference-Header-Content-Length is {header_length} but the body has "
                f"{len(body)} bytes; it must be the length of the JSON header"
            )
        header_bytes, start = body[:header_length], header_length
    # Tensor data nests one level per dimension: allow that on top of the structural depth.
    header = parse_json(header_bytes, max_depth + 32)
    if not isinstance(header, dict):
        raise InvalidInputError("request body must be a JSON object with an `inputs` list")
    raw_inputs = header.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise InvalidInputError("`inputs` must be a non-empty list of tensors")
    request_id = _request_id(header.get("id"))
    params = _parameters(header, "request")
    inputs: dict[str, np.ndarray] = {}
    binary: list[BinaryTensor] = []
    offset = start  # the binary tensors follow the header, in the order of the inputs
    for i, raw in enumerate(raw_inputs):
        if type(raw) is not dict:
            raise InvalidInputError(
                f"inputs[{i}] must be an object with name, shape, datatype, data"
            )
        name, shape, datatype = _tensor_header(raw, i, max_elements)
        if name in inputs:
            raise InvalidInputError(f"inputs[{i}]: input {name!r} appears twice")
        size = _parameters(raw, i).get("binary_data_size")
        if size is not None:
            if header_length is None:
                raise InvalidInputError(
                    f"{_where(i, name)} sets binary_data_size, which needs the binary tensor "
                    "extension: send the Inference-Header-Content-Length header; in a JSON "
                    "body give `data` instead"
                )
            if type(size) is not int or size < 0:
                raise InvalidInputError(
                    f"inputs[{i}].parameters.binary_data_size must be an integer >= 0"
                )
            if offset + size > len(body):
                raise InvalidInputError(
                    f"{_where(i, name)} declares {size} binary bytes but only "
                    f"{len(body) - offset} remain after the JSON header"
                )
            binary.append(binary_tensor(i, name, shape, datatype, offset=offset - start, size=size))
            inputs[name] = _PENDING  # keeps the order of the inputs
            offset += size
        else:
            if "data" not in raw:
                raise InvalidInputError(
                    f"{_where(i, name)} has neither `data` nor binary_data_size"
                )
            inputs[name] = _from_json(raw["data"], shape, datatype, _where(i))
    if offset != len(body):
        raise InvalidInputError(
            f"{len(body) - offset} bytes after the last binary tensor are not claimed by any "
            "input's binary_data_size"
        )
    binary_default = bool(params.get("binary_data_output", False))
    outputs = _requested_outputs(header["outputs"], binary_default) if "outputs" in header else None
    if binary:
        inputs.update(read_tensors(body, start, binary))
    request = InferRequest(request_id, inputs, outputs, binary_default, params)
    if len(binary) != len(inputs):  # a tensor inside the header: nothing to reuse
        return request, None
    layout = _Layout(
        request_id,
        tuple(binary),
        offset - start,
        outputs,
        binary_default,
        MappingProxyType(dict(params)),
    )
    return request, layout


def _request_id(raw: Any) -> str | None:
    """The body's ``id``: echoed in the answer, so bounded and printable.

    An empty ``id`` (what perf_analyzer sends) counts as none, as Triton treats it.
    """
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str) or not _ID_PATTERN.fullmatch(raw):
        shown = raw[:40] if isinstance(raw, str) else type(raw).__name__
        raise InvalidInputError(
            f"`id` {shown!r} must be a string of 1 to {MAX_ID_LENGTH} printable ASCII "
            "characters (no control characters)"
        )
    return raw


def _requested_outputs(raw_outputs: Any, binary_default: bool) -> tuple[RequestedOutput, ...]:
    if not isinstance(raw_outputs, list):
        raise InvalidInputError("`outputs` must be a list of {name, parameters}")
    requested = []
    for i, raw in enumerate(raw_outputs):
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise InvalidInputError(f"outputs[{i}] must be an object with a string `name`")
        out_params = _parameters(raw, f"outputs[{i}]")
        if "classification" in out_params:
            raise UnsupportedRequestError(
                f"outputs[{i}]: the classification extension is not supported; return "
                "class labels from predict() instead"
            )
        binary = bool(out_params.get("binary_data", binary_default))
        requested.append(RequestedOutput(raw["name"], binary))
    return tuple(requested)


_NO_PARAMETERS: Mapping[str, Any] = {}


def _parameters(obj: Mapping[str, Any], where: str | int) -> Mapping[str, Any]:
    """``obj``'s parameters (``where``: a label, or the index of an input)."""
    params = obj.get("parameters", _NO_PARAMETERS)
    if params is _NO_PARAMETERS:
        return params
    if type(params) is not dict:
        raise InvalidInputError(f"{_label(where)}.parameters must be an object")
    for key, value in params.items():  # the protocol's parameter values are scalars
        if type(value) not in _SCALARS:
            raise InvalidInputError(
                f"{_label(where)}.parameters[{key!r}] must be a string, number or boolean"
            )
    return params


_SCALARS = frozenset({str, int, float, bool})


def _label(where: str | int) -> str:
    return _where(where) if isinstance(where, int) else where


def _tensor_header(
    raw: Mapping[str, Any], i: int, max_elements: int
) -> tuple[str, tuple[int, ...], str]:
    name, shape, datatype = raw.get("name"), raw.get("shape"), raw.get("datatype")
    if (  # the usual tensor, checked in one expression; anything else is explained below
        type(name) is str
        and name
        and type(datatype) is str
        and datatype in DATATYPES
        and type(shape) is list
        and len(shape) <= MAX_DIMENSIONS
        and all(type(d) is int and 0 <= d <= max_elements for d in shape)
        and math.prod(shape) <= max_elements
        and 0 not in shape
    ):
        return name, tuple(shape), datatype
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"inputs[{i}].name must be a non-empty string")
    where = _where(i, name)
    checked = check_shape(shape, where, max_elements)
    return name, checked, check_datatype(datatype, where)


def _flatten(data: list[Any]) -> list[Any]:
    if list not in map(type, data):  # already flat, as most clients send it (a C loop)
        return data
    out: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out


# Element types JSON numbers decode to (bool is its own type, so true/false never pass).
_INTEGER = frozenset({int})
_NUMBER = frozenset({int, float})


def _from_json(data: Any, shape: tuple[int, ...], datatype: str, where: str) -> np.ndarray:
    if not isinstance(data, list):  # the protocol's tensor data is an array, even of one
        raise InvalidInputError(f"{where}.data must be a list (flat or nested), got {data!r:.40}")
    flat = _flatten(data)
    count = math.prod(shape)
    if len(flat) != count:
        raise InvalidInputError(
            f"{where}: {len(flat)} values for shape {list(shape)} ({count} expected)"
        )
    if datatype == "BYTES":
        if not all(isinstance(v, str) for v in flat):
            raise InvalidInputError(f"{where}: BYTES data must be strings")
        array = np.empty(count, dtype=object)
        try:
            array[:] = [v.encode("utf-8") for v in flat]
        except UnicodeEncodeError as e:
            raise InvalidInputError(
                f"{where}: BYTES data holds a lone surrogate ({e.object[e.start : e.end]!r}); "
                "send valid UTF-8 text, or binary data"
            ) from None
        return array.reshape(shape)
    if datatype == "BOOL":
        if not all(isinstance(v, bool) for v in flat):
            raise InvalidInputError(f"{where}: BOOL data must be true/false")
        return np.array(flat, dtype=bool).reshape(shape)
    integer = datatype.startswith(("INT", "UINT"))
    allowed = _INTEGER if integer else _NUMBER
    if not allowed.issuperset(map(type, flat)):  # C loops: this runs on the event loop
        # An integer written with a fraction of zero (2.0) is an integer, as JSON Schema
        # (and so the OpenAPI document) counts it.
        wrong = [
            v
            for v in flat
            if type(v) not in allowed and not (integer and type(v) is float and v.is_integer())
        ]
        if wrong:
            kind = "integers" if integer else "numbers"
            raise InvalidInputError(f"{where}: {datatype} data must be {kind}, got {wrong[0]!r}")
    dtype = numpy_dtype(datatype)  # BF16 is served as FP32
    if integer:
        if flat:
            lowest, highest = _integer_range(dtype)
            if min(flat) < lowest or max(flat) > highest:
                raise InvalidInputError(f"{where}: value out of range for {datatype}")
        return np.array(flat, dtype=dtype).reshape(shape)  # in range: nothing overflows
    with np.errstate(over="ignore"):
        array = np.array(flat, dtype=dtype).reshape(shape)
    check_finite(array, where)  # e.g. 1e300 sent as FP32 overflows to Infinity
    return array


@functools.cache
def _integer_range(dtype: np.dtype[Any]) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)
