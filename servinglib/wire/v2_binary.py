"""The tensors of a binary Open Inference body: raw bytes after the JSON header.

Numbers are little-endian and row-major; BYTES elements are each a 4-byte little-endian
length followed by the bytes; BF16 travels as the upper 16 bits of an FP32. The header
says where each tensor lies (:class:`BinaryTensor`); :func:`read_tensors` turns the bytes
after the header into arrays with one copy for all of them, so every array is writable
(a model may change its input in place) and none keeps the request body alive.

Example::

    tensor = binary_tensor(0, "x", (1, 2), "INT64", offset=0, size=16)
    read_tensors(body, header_length, [tensor])   # {"x": array([[1, 2]])}
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servinglib.errors import InvalidInputError
from servinglib.wire.datatypes import numpy_dtype, wire_dtype
from servinglib.wire.tensor_checks import check_finite

__all__ = ["BinaryTensor", "binary_tensor", "input_label", "read_tensors"]


def input_label(index: int, name: str | None = None) -> str:
    """How a message names input ``index`` of a request (built only for a message)."""
    return f"inputs[{index}]" if name is None else f"inputs[{index}] ({name!r})"


@dataclass(frozen=True, slots=True)
class BinaryTensor:
    """Input ``index`` of the request: its name, shape, datatype and where its bytes lie
    (``offset`` from the end of the JSON header, ``size`` bytes)."""

    index: int
    name: str
    shape: tuple[int, ...]
    datatype: str
    offset: int
    size: int
    dtype: np.dtype[Any] | None  # the wire dtype; None for BYTES

    @property
    def where(self) -> str:
        """How a message names the tensor."""
        return input_label(self.index)


def binary_tensor(
    index: int, name: str, shape: tuple[int, ...], datatype: str, *, offset: int, size: int
) -> BinaryTensor:
    """Describe input ``index`` after checking that ``size`` bytes fit its shape.

    Raises:
        InvalidInputError: a fixed-size datatype whose shape needs another number of bytes.
    """
    if datatype == "BYTES":
        return BinaryTensor(index, name, shape, datatype, offset, size, None)
    dtype = wire_dtype(datatype)
    expected = math.prod(shape) * dtype.itemsize
    if size != expected:
        raise InvalidInputError(
            f"{input_label(index)}: {size} binary bytes for shape {list(shape)} of {datatype} "
            f"(expected {expected})"
        )
    return BinaryTensor(index, name, shape, datatype, offset, size, dtype)


def read_tensors(body: bytes, start: int, tensors: Sequence[BinaryTensor]) -> dict[str, np.ndarray]:
    """The arrays of ``tensors``, whose bytes follow the JSON header ending at ``start``.

    Raises:
        InvalidInputError: a float tensor holds NaN or Infinity (JSON cannot carry them
            either), or BYTES elements are framed wrongly.
    """
    data = bytearray(memoryview(body)[start:])  # one copy: writable, and aligned at 0
    arrays = {}
    for tensor in tensors:
        arrays[tensor.name] = _array(data, tensor)
    return arrays


def _array(data: bytearray, tensor: BinaryTensor) -> np.ndarray:
    dtype = tensor.dtype
    if dtype is None:
        return _bytes_elements(data[tensor.offset : tensor.offset + tensor.size], tensor)
    if tensor.offset % dtype.itemsize:  # behind a tensor of another width: not aligned
        array = np.frombuffer(data, dtype, math.prod(tensor.shape), tensor.offset)
        array = array.reshape(tensor.shape).copy()
    else:
        array = np.ndarray(tensor.shape, dtype, data, tensor.offset)  # a view, no copy
    if tensor.datatype == "BF16":
        array = (array.astype(np.uint32) << 16).view(np.float32)
    elif not dtype.isnative:  # a big-endian machine
        array = array.astype(numpy_dtype(tensor.datatype))
    if array.dtype.kind == "f":
        check_finite(array, tensor.where)
    return array


def _bytes_elements(data: bytearray, tensor: BinaryTensor) -> np.ndarray:
    """Length-prefixed BYTES elements as an object array of ``bytes``."""
    elements = []
    pos = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise InvalidInputError(f"{tensor.where}: truncated BYTES element length prefix")
        (length,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if pos + length > len(data):
            raise InvalidInputError(f"{tensor.where}: BYTES element of {length} bytes is truncated")
        elements.append(bytes(data[pos : pos + length]))
        pos += length
    count = math.prod(tensor.shape)
    if len(elements) != count:
        raise InvalidInputError(
            f"{tensor.where}: {len(elements)} BYTES elements for shape {list(tensor.shape)}"
        )
    array = np.empty(count, dtype=object)
    array[:] = elements
    return array.reshape(tensor.shape)
