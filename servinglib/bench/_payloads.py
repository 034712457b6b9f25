"""Request bodies for each protocol, built once before the load starts.

``infer`` is the ``POST /infer`` body (``model_id`` + ``features``); ``v2`` the Open
Inference JSON body; ``v2-binary`` the same with every tensor as raw bytes after the JSON
header (``Inference-Header-Content-Length``), as Triton's clients send it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servinglib.errors import ConfigError
from servinglib.wire.datatypes import numpy_dtype

__all__ = ["PROTOCOLS", "Prepared", "build_requests", "raw_bytes", "v2_datatype"]

PROTOCOLS = ("infer", "v2", "v2-binary", "grpc")


@dataclass(frozen=True)
class Prepared:
    """One ready-to-send request: the HTTP path, body and headers (or the gRPC inputs)."""

    path: str
    body: bytes
    headers: Mapping[str, str]
    tensors: Mapping[str, np.ndarray] | None = None


def build_requests(
    model: str,
    version: str | None,
    inputs: Sequence[Mapping[str, Any]],
    protocol: str,
    datatypes: Mapping[str, str],
) -> list[Prepared]:
    """One prepared request per input; ``datatypes`` (input name -> v2 datatype) comes from
    the model's metadata, so tensors carry the type the server declared."""
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown protocol {protocol!r}; choose one of {list(PROTOCOLS)}")
    if protocol == "infer":
        return [_infer(model, version, features) for features in inputs]
    tensors = [_tensors(features, datatypes) for features in inputs]
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    if protocol == "grpc":
        from servinglib.bench._grpc import infer_request_bytes

        return [
            Prepared("", infer_request_bytes(model, version, t, datatypes), {}, t) for t in tensors
        ]
    if protocol == "v2":
        return [_v2_json(path, t) for t in tensors]
    return [_v2_binary(path, t) for t in tensors]


def _infer(model: str, version: str | None, features: Mapping[str, Any]) -> Prepared:
    body: dict[str, Any] = {"model_id": model, "features": dict(features)}
    if version:
        body["version"] = version
    return Prepared("/infer", json.dumps(body).encode(), {"Content-Type": "application/json"})


def _tensors(features: Mapping[str, Any], datatypes: Mapping[str, str]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, value in features.items():
        datatype = datatypes.get(name)
        if datatype == "BYTES" or isinstance(value, str):
            array = np.asarray(value, dtype=object)
            out[name] = array.reshape(1) if array.ndim == 0 else array
            continue
        array = np.asarray(value)
        if datatype is not None:
            array = array.astype(numpy_dtype(datatype))
        out[name] = array.reshape(1) if array.ndim == 0 else array
    return out


def v2_datatype(array: np.ndarray) -> str:
    if array.dtype == object:
        return "BYTES"
    names = {"f": "FP", "i": "INT", "u": "UINT", "b": "BOOL"}
    if array.dtype.kind == "b":
        return "BOOL"
    return f"{names[array.dtype.kind]}{array.dtype.itemsize * 8}"


def _v2_json(path: str, tensors: Mapping[str, np.ndarray]) -> Prepared:
    inputs = [
        {
            "name": name,
            "shape": list(array.shape),
            "datatype": v2_datatype(array),
            "data": array.reshape(-1).tolist(),
        }
        for name, array in tensors.items()
    ]
    body = json.dumps({"inputs": inputs}).encode()
    return Prepared(path, body, {"Content-Type": "application/json"}, tensors)


def raw_bytes(array: np.ndarray) -> bytes:
    if array.dtype != object:
        return np.ascontiguousarray(array).tobytes()
    parts = []
    for item in array.reshape(-1):
        data = item if isinstance(item, bytes) else str(item).encode()
        parts.append(len(data).to_bytes(4, "little") + data)
    return b"".join(parts)


def _v2_binary(path: str, tensors: Mapping[str, np.ndarray]) -> Prepared:
    inputs, payload = [], []
    for name, array in tensors.items():
        raw = raw_bytes(array)
        inputs.append(
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": v2_datatype(array),
                "parameters": {"binary_data_size": len(raw)},
            }
        )
        payload.append(raw)
    header = json.dumps({"inputs": inputs}).encode()
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }
    return Prepared(path, header + b"".join(payload), headers, tensors)
