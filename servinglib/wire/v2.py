"""Decode and encode Open Inference Protocol v2 tensors: JSON and the binary extension.

Binary tensor data extension (Triton/KServe): the body is a JSON header of
``Inference-Header-Content-Length`` bytes followed by raw tensor bytes, in the order of the
inputs whose ``parameters.binary_data_size`` is set. Numbers are little-endian, row-major;
BYTES elements are each a 4-byte little-endian length followed by the bytes.
"""

from __future__ import annotations

import functools
import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servinglib import jsonbytes
from servinglib.errors import InvalidInputError, UnsupportedRequestError
from servinglib.wire.datatypes import datatype_of, numpy_dtype, wire_dtype
from servinglib.wire.strict_json import parse_json
from servinglib.wire.tensor_checks import MAX_ELEMENTS, check_datatype, check_finite, check_shape

__all__ = ["MAX_ID_LENGTH", "InferRequest", "RequestedOutput", "decode_request", "encode_response"]

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
    if header_length is None:
        header_bytes, binary = body, b""
    else:
        if header_length < 0 or header_length > len(body):
            raise InvalidInputError(
                f"Inference-Header-Content-Length is {header_length} but the body has "
                f"{len(body)} bytes; it must be the length of the JSON header"
            )
        header_bytes, binary = body[:header_length], body[header_length:]
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
    offset = 0
    for i, raw in enumerate(raw_inputs):
        where = f"inputs[{i}]"
        if not isinstance(raw, dict):
            raise InvalidInputError(f"{where} must be an object with name, shape, datatype, data")
        name, shape, datatype = _tensor_header(raw, where, max_elements)
        if name in inputs:
            raise InvalidInputError(f"{where}: input {name!r} appears twice")
        size = _parameters(raw, where).get("binary_data_size")
        if size is not None:
            if header_length is None:
                raise InvalidInputError(
                    f"{where} ({name!r}) sets binary_data_size, which needs the binary tensor "
                    "extension: send the Inference-Header-Content-Length header; in a JSON "
                    "body give `data` instead"
                )
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise InvalidInputError(
                    f"{where}.parameters.binary_data_size must be an integer >= 0"
                )
            if offset + size > len(binary):
                raise InvalidInputError(
                    f"{where} ({name!r}) declares {size} binary bytes but only "
                    f"{len(binary) - offset} remain after the JSON header"
                )
            inputs[name] = _from_binary(binary[offset : offset + size], shape, datatype, where)
            offset += size
        else:
            if "data" not in raw:
                raise InvalidInputError(
                    f"{where} ({name!r}) has neither `data` nor binary_data_size"
                )
            inputs[name] = _from_json(raw["data"], shape, datatype, where)
    if offset != len(binary):
        raise InvalidInputError(
            f"{len(binary) - offset} bytes after the last binary tensor are not claimed by any "
            "input's binary_data_size"
        )
    binary_default = bool(params.get("binary_data_output", False))
    outputs = _requested_outputs(header["outputs"], binary_default) if "outputs" in header else None
    return InferRequest(request_id, inputs, outputs, binary_default, params)


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


def _parameters(obj: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    params = obj.get("parameters", {})
    if not isinstance(params, dict):
        raise InvalidInputError(f"{where}.parameters must be an object")
    for key, value in params.items():  # the protocol's parameter values are scalars
        if not isinstance(value, str | int | float):  # bool is an int
            raise InvalidInputError(
                f"{where}.parameters[{key!r}] must be a string, number or boolean"
            )
    return params


def _tensor_header(
    raw: Mapping[str, Any], where: str, max_elements: int
) -> tuple[str, tuple[int, ...], str]:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"{where}.name must be a non-empty string")
    where = f"{where} ({name!r})"
    shape = check_shape(raw.get("shape"), where, max_elements)
    return name, shape, check_datatype(raw.get("datatype"), where)


def _from_binary(data: bytes, shape: tuple[int, ...], datatype: str, where: str) -> np.ndarray:
    count = math.prod(shape)
    if datatype == "BYTES":
        elements = []
        pos = 0
        while pos < len(data):
            if pos + 4 > len(data):
                raise InvalidInputError(f"{where}: truncated BYTES element length prefix")
            (length,) = struct.unpack_from("<I", data, pos)
            pos += 4
            if pos + length > len(data):
                raise InvalidInputError(f"{where}: BYTES element of {length} bytes is truncated")
            elements.append(data[pos : pos + length])
            pos += length
        if len(elements) != count:
            raise InvalidInputError(
                f"{where}: {len(elements)} BYTES elements for shape {list(shape)}"
            )
        array = np.empty(count, dtype=object)
        array[:] = elements
        return array.reshape(shape)
    dtype = wire_dtype(datatype)
    if len(data) != count * dtype.itemsize:
        raise InvalidInputError(
            f"{where}: {len(data)} binary bytes for shape {list(shape)} of {datatype} "
            f"(expected {count * dtype.itemsize})"
        )
    array = np.frombuffer(data, dtype=dtype).reshape(shape)
    if datatype == "BF16":
        array = (array.astype(np.uint32) << 16).view(np.float32)
    else:
        array = array.astype(dtype.newbyteorder("="), copy=True)
    check_finite(array, where)  # the rule JSON bodies follow, for binary tensors too
    return array


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
    if integer and flat:
        lowest, highest = _integer_range(dtype)
        if min(flat) < lowest or max(flat) > highest:
            raise InvalidInputError(f"{where}: value out of range for {datatype}")
    with np.errstate(over="ignore"):
        array = np.array(flat, dtype=dtype).reshape(shape)
    check_finite(array, where)  # e.g. 1e300 sent as FP32 overflows to Infinity
    return array


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def encode_response(
    model: str,
    *,
    version: str,
    request_id: str | None,
    outputs: Mapping[str, Any],
    requested: Sequence[RequestedOutput] | None,
    binary_default: bool,
) -> tuple[bytes, int | None]:
    """Encode outputs; returns the body and the JSON header length when binary is used.

    Raises:
        InvalidInputError: a requested output does not exist.
        TypeError: the model returned something that is not tensor-like.
        jsonbytes.NonFiniteError: a JSON output holds NaN or Infinity.
    """
    if requested is None:
        chosen = [(name, binary_default) for name in outputs]
    else:
        missing = [r.name for r in requested if r.name not in outputs]
        if missing:
            raise InvalidInputError(
                f"model {model!r} has no output(s) {missing}; its outputs are {sorted(outputs)}"
            )
        chosen = [(r.name, r.binary) for r in requested]
    tensors = []
    chunks: list[bytes] = []
    for name, binary in chosen:
        array = np.asarray(outputs[name])
        if array.ndim == 0:
            array = array.reshape(1)
        datatype = datatype_of(array)
        tensor: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            raw = _tensor_bytes(array, datatype)
            tensor["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            tensor["data"] = _tensor_json(array, datatype, name)
        tensors.append(tensor)
    body: dict[str, Any] = {"model_name": model, "model_version": version, "outputs": tensors}
    if request_id is not None:
        body["id"] = request_id
    # NaN and Infinity are not JSON: refuse them rather than emit a body clients cannot parse.
    try:
        header = jsonbytes.dumps(body)
    except jsonbytes.NonFiniteError as e:
        raise jsonbytes.NonFiniteError(
            f"model {model!r} returned NaN or Infinity; JSON cannot carry them"
        ) from e
    if not chunks:
        return header, None
    return header + b"".join(chunks), len(header)


def _tensor_bytes(array: np.ndarray, datatype: str) -> bytes:
    if datatype == "BYTES":
        parts = []
        for value in array.reshape(-1):
            raw = _as_bytes(value)
            parts.append(struct.pack("<I", len(raw)) + raw)
        return b"".join(parts)
    return np.ascontiguousarray(array, dtype=wire_dtype(datatype)).tobytes()


def _tensor_json(array: np.ndarray, datatype: str, name: str) -> Any:
    flat = array.reshape(-1)
    if datatype != "BYTES":
        return np.ascontiguousarray(flat)  # written by orjson directly, no Python floats
    out = []
    for value in flat:
        try:
            out.append(value.decode("utf-8") if isinstance(value, bytes) else str(value))
        except UnicodeDecodeError as e:
            raise InvalidInputError(
                f"output {name!r} holds bytes that are not UTF-8; request it with "
                '"parameters": {"binary_data": true}'
            ) from e
    return out


@functools.cache
def _integer_range(dtype: np.dtype[Any]) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)
