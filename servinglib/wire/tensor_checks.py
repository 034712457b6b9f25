"""The one validation layer for tensors: datatype, shape, element count, finiteness.

The Open Inference codec (JSON and binary bodies alike) and the service's check of a
model's declared inputs call these, so a tensor is refused the same way whichever way it
arrived. Every refusal is an :class:`~servinglib.errors.InvalidInputError` (a 400) that
names the tensor and the fix.

Example::

    shape = check_shape([2, 3], "inputs[0] ('x')", max_elements=1024)   # (2, 3)
    check_finite(np.array([1.0, np.nan]), "inputs[0] ('x')")            # raises
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servinglib.errors import InvalidInputError
from servinglib.wire.datatypes import DATATYPES, datatype_of, numpy_dtype

__all__ = [
    "MAX_DIMENSIONS",
    "MAX_ELEMENTS",
    "check_datatype",
    "check_declared_datatype",
    "check_finite",
    "check_shape",
]

MAX_ELEMENTS = 16 * 1024 * 1024
MAX_DIMENSIONS = 32


def check_datatype(raw: Any, where: str) -> str:
    """``raw`` as an Open Inference datatype name (strings only; objects and lists refused).

    Raises:
        InvalidInputError: not one of the datatypes of :data:`DATATYPES`.
    """
    if not isinstance(raw, str) or raw not in DATATYPES:
        shown = raw if isinstance(raw, str) else type(raw).__name__
        raise InvalidInputError(f"{where}.datatype {shown!r} is not one of {', '.join(DATATYPES)}")
    return raw


def check_shape(raw: Any, where: str, max_elements: int = MAX_ELEMENTS) -> tuple[int, ...]:
    """``raw`` as a shape: at most :data:`MAX_DIMENSIONS` integers >= 0, each and the
    product of those other than 0 at most ``max_elements`` (so ``[0, 10**30]`` and
    ``[0, 4096, 4096, 4096]`` are refused too).

    Raises:
        InvalidInputError: naming the dimension or the limit (``server.max_tensor_elements``).
    """
    if not isinstance(raw, list):
        raise InvalidInputError(f"{where}.shape must be a list of integers >= 0")
    if len(raw) > MAX_DIMENSIONS:
        raise InvalidInputError(f"{where} has {len(raw)} dimensions; at most {MAX_DIMENSIONS}")
    shape = []
    for value in raw:
        # JSON does not tell 3 from 3.0
        dimension = int(value) if isinstance(value, float) and value.is_integer() else value
        if not isinstance(dimension, int) or isinstance(dimension, bool) or dimension < 0:
            raise InvalidInputError(f"{where}.shape must be a list of integers >= 0")
        if dimension > max_elements:
            raise InvalidInputError(
                f"{where}.shape has a dimension of {dimension}; at most {max_elements} "
                "(server.max_tensor_elements)"
            )
        shape.append(dimension)
    # Dimensions other than 0 count too: [0, 4096, 4096, 4096] holds no element, but
    # NumPy cannot even lay out such a shape once its product passes 2**63.
    if element_count([d for d in shape if d]) > max_elements:
        raise InvalidInputError(
            f"{where} has more than {max_elements} elements (server.max_tensor_elements), "
            "counting every dimension other than 0"
        )
    return tuple(shape)


def element_count(shape: list[int] | tuple[int, ...]) -> int:
    """The product of ``shape`` (each dimension is already bounded, so it stays small enough:
    it stops growing past 2**64)."""
    count = 1
    for dimension in shape:
        count = min(count * dimension, 1 << 64)
    return count


def check_finite(array: np.ndarray, where: str) -> None:
    """Refuse NaN and Infinity in a floating-point tensor (JSON cannot carry them either).

    Raises:
        InvalidInputError: naming the tensor and the first non-finite position.
    """
    if array.dtype.kind == "f" and array.size and not np.isfinite(array).all():
        position = int(np.flatnonzero(~np.isfinite(array.reshape(-1)))[0])
        raise InvalidInputError(
            f"{where} holds NaN or Infinity (flat position {position}); send finite numbers"
        )


def check_declared_datatype(model: str, name: str, declared: str, array: np.ndarray) -> None:
    """Refuse a tensor whose datatype is not the one the model declares for the input.

    Like Triton, no silent cast: INT64 sent to an FP32 input is a 400.

    Raises:
        InvalidInputError: naming both datatypes (``field`` is the input name).
    """
    if array.dtype == numpy_dtype(declared):
        return
    try:
        sent = datatype_of(array)
    except TypeError:
        sent = str(array.dtype)
    raise InvalidInputError(
        f"input {name!r} of model {model!r} has datatype {sent}; the model declares "
        f"{declared}: send {declared}",
        field=name,
    )
