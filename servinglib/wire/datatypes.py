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


def wire_dtype(datatype: str) -> np.dtype[Any]:
    """The little-endian dtype of ``datatype``'s binary form (not for BYTES).

    Raises:
        KeyError: not an Open Inference datatype.
        TypeError: BYTES has no fixed-size dtype.
    """
    raw = DATATYPES[datatype]
    if raw is None:
        raise TypeError("BYTES elements are length-prefixed; they have no fixed-size dtype")
    return np.dtype(raw)


def numpy_dtype(datatype: str) -> np.dtype[Any]:
    """The native-order dtype of arrays of ``datatype`` as models see them.

    BYTES is ``object`` (elements are ``bytes``); BF16 is ``float32``; an unknown
    datatype is ``float32``.
    """
    if datatype == "BYTES":
        return np.dtype(object)
    if datatype == "BF16" or datatype not in DATATYPES:
        return np.dtype(np.float32)
    return wire_dtype(datatype).newbyteorder("=")


def datatype_of(array: np.ndarray | np.dtype[Any]) -> str:
    """Open Inference datatype of an array or dtype (strings and objects are BYTES).

    Raises:
        TypeError: the dtype has no Open Inference datatype (complex numbers, dates).
    """
    dtype = array if isinstance(array, np.dtype) else array.dtype
    kind = dtype.kind
    if kind in "USO":
        return "BYTES"
    if kind == "b":
        return "BOOL"
    if kind in _KIND_PREFIX:
        return f"{_KIND_PREFIX[kind]}{dtype.itemsize * 8}"
    raise TypeError(f"dtype {dtype} has no Open Inference datatype")
