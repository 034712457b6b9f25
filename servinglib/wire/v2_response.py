"""Encode Open Inference Protocol v2 answers: output tensors as JSON data or binary.

With the binary tensor data extension the body is a JSON header (its length in the
``Inference-Header-Content-Length`` response header) followed by the raw bytes of every
output asked for with ``binary_data``, in the header's order.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from servinglib.errors import InvalidInputError
from servinglib.wire import jsonbytes
from servinglib.wire.datatypes import datatype_of, wire_dtype
from servinglib.wire.v2 import RequestedOutput

__all__ = ["encode_response", "tensor_bytes"]


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
            raw = tensor_bytes(array, datatype)
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
    return b"".join((header, *chunks)), len(header)


def tensor_bytes(array: np.ndarray, datatype: str) -> bytes:
    """``array`` in the binary form of ``datatype`` (also gRPC's ``raw_output_contents``)."""
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
