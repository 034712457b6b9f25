"""The one table of Open Inference datatypes and the NumPy dtypes that carry them.

Example::

    numpy_dtype("FP32")                        # dtype('float32')
    datatype_of(np.zeros(3, dtype=np.int64))   # "INT64"
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["DATATYPES", "datatype_of", "numpy_dtype", "wire_dtype"]

# Open Inference datatype -> the little-endian NumPy dtype of its binary form (None: BYTES,
# length-prefixed strings). BF16 travels as its upper 16 bits and is served as FP32 (exact:
# every BF16 value is an FP32 value).
DATATYPES: dict[str, str | None] = {
    "BOOL": "|b1",
    "UINT8": "|u1",
    "UINT16": "<u2",
    "UINT32": "<u4",
    "UINT64": "<u8",
    "INT8": "|i1",
    "INT16": "<i2",
    "INT32": "<i4",
    "INT64": "<i8",
    "FP16": "<f2",
    "FP32": "<f4",
    "FP64": "<f8",
    "BF16": "<u2",
    "BYTES": None,
}

_KIND_PREFIX = {"i": "INT", "u": "UINT", "f": "FP"}

# Built once: the request path looks these up for every tensor.
_WIRE = {name: np.dtype(raw) for name, raw in DATATYPES.items() if raw is not None}
_NATIVE = {name: dtype.newbyteorder("=") for name, dtype in _WIRE.items()}
_NATIVE.update(BYTES=np.dtype(object), BF16=np.dtype(np.float32))
_FLOAT32 = np.dtype(np.float32)
_NAMES = {dtype: name for name, dtype in _NATIVE.items() if name not in ("BYTES", "BF16")}


def wire_dtype(datatype: str) -> np.dtype[Any]:
    """The little-endian dtype of ``datatype``'s binary form (not for BYTES).

    Raises:
        KeyError: not an Open Inference datatype.
        TypeError: BYTES has no fixed-size dtype.
    """
    dtype = _WIRE.get(datatype)
    if dtype is None:
        if datatype == "BYTES":
            raise TypeError("BYTES elements are length-prefixed; they have no fixed-size dtype")
        raise KeyError(datatype)
    return dtype


def numpy_dtype(datatype: str) -> np.dtype[Any]:
    """The native-order dtype of arrays of ``datatype`` as models see them.

    BYTES is ``object`` (elements are ``bytes``); BF16 is ``float32``; an unknown
    datatype is ``float32``.
    """
    return _NATIVE.get(datatype, _FLOAT32)


def datatype_of(array: np.ndarray | np.dtype[Any]) -> str:
    """Open Inference datatype of an array or dtype (strings and objects are BYTES).

    Raises:
        TypeError: the dtype has no Open Inference datatype (complex numbers, dates).
    """
    dtype = array if isinstance(array, np.dtype) else array.dtype
    known = _NAMES.get(dtype)
    if known is not None:
        return known
    kind = dtype.kind
    if kind in "USO":
        return "BYTES"
    if kind == "b":
        return "BOOL"
    if kind in _KIND_PREFIX:
        return f"{_KIND_PREFIX[kind]}{dtype.itemsize * 8}"
    raise TypeError(f"dtype {dtype} has no Open Inference datatype")
