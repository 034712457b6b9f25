"""JSON Schemas of Open Inference request tensors, exact for the inputs a model declares.

A tensor's ``data`` must hold exactly the product of its ``shape`` elements, which JSON
Schema cannot compute. For a declared input with fixed dimensions the shape is a constant,
so the element count is one too (``minItems`` = ``maxItems``); an input with one ``-1``
dimension is listed as one variant per size of that dimension, from 1 to ``listed_sizes``.
Element values are bounded to what the datatype holds (an FP32 value past 3.4e38 is a 400)
and by the model's ``input_schema`` property of the same name (see
:mod:`servinglib.wire.tensor_bounds`).

Example::

    tensor = declared_tensor(TensorSpec("x", "FP64", (2,)), listed_sizes=8, bounds={})
    # {"properties": {"shape": {"const": [2]}, "data": {"minItems": 2, "maxItems": 2, ...}}}
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from servinglib.errors import InvalidInputError
from servinglib.model import TensorSpec
from servinglib.wire.datatypes import DATATYPES, numpy_dtype
from servinglib.wire.tensor_bounds import check_dimensions, dimension_bounds, element_bounds

__all__ = ["PARAMETERS", "declared_inputs", "declared_outputs", "element_schema"]

PARAMETERS = {
    "type": "object",
    "description": "Open Inference parameters (e.g. binary_data_size, binary_data, priority): "
    "strings, numbers or booleans.",
    "additionalProperties": {"type": ["string", "number", "boolean"]},
}


def _largest_accepted(bound: float, dtype: np.dtype[Any]) -> float:
    """The largest JSON number that decodes to a ``dtype`` value <= ``bound``: float32 and
    float16 round to nearest (ties to even), so 16.000000000000004 sent as FP32 is 16."""
    if dtype.itemsize == 8:
        return bound
    lowest = dtype.type(-np.inf)
    below = dtype.type(bound)
    if float(below) > bound:
        below = np.nextafter(below, lowest)
    with np.errstate(over="ignore"):
        above = np.nextafter(below, dtype.type(np.inf))
    step = float(above) - float(below)
    if not math.isfinite(step):  # the datatype's maximum: half a step more overflows
        step = float(below) - float(np.nextafter(below, lowest))
    middle = float(below) + step / 2  # exact in float64
    bits = np.array(below).view(np.uint32 if dtype.itemsize == 4 else np.uint16)
    return middle if int(bits) % 2 == 0 else float(np.nextafter(middle, -np.inf))


def _number_range(dtype: np.dtype[Any], low: float, high: float) -> dict[str, Any]:
    """The JSON numbers that decode to ``dtype`` values within ``[low, high]``."""
    return {
        "type": "number",
        "minimum": -_largest_accepted(-low, dtype),
        "maximum": _largest_accepted(high, dtype),
    }


def element_schema(
    datatype: str, low: float | None = None, high: float | None = None
) -> dict[str, Any]:
    """One element of ``data`` for ``datatype``: its JSON type and the range it holds,
    narrowed to ``[low, high]`` where given."""
    if datatype == "BYTES":
        return {"type": "string"}
    if datatype == "BOOL":
        return {"type": "boolean"}
    dtype = numpy_dtype(datatype)  # BF16 is served as FP32
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        low = int(info.min) if low is None else max(int(info.min), math.ceil(low))
        high = int(info.max) if high is None else min(int(info.max), math.floor(high))
        return {"type": "integer", "minimum": low, "maximum": high}
    limit = float(np.finfo(dtype).max)
    low = -limit if low is None else max(-limit, low)
    high = limit if high is None else min(limit, high)
    return _number_range(dtype, low, high)


def _tensor(spec: TensorSpec, shape: Sequence[int], bounds: Mapping[str, Any]) -> dict[str, Any]:
    count = math.prod(shape)
    dtype = numpy_dtype(spec.datatype)
    element = element_schema(spec.datatype, bounds.get("minimum"), bounds.get("maximum"))
    if spec.datatype == "BYTES" and "maxLength" in bounds:
        element["maxLength"] = bounds["maxLength"]
    return {
        "type": "object",
        "required": ["name", "shape", "datatype", "data"],
        "properties": {
            "name": {"const": spec.name},
            "shape": {"const": list(shape)},
            # datatypes decoded to the same NumPy type are accepted (BF16 for FP32)
            "datatype": {"enum": [d for d in DATATYPES if numpy_dtype(d) == dtype]},
            # binary_data_size needs the binary extension's header: a JSON body gives data
            "parameters": PARAMETERS | {"properties": {"binary_data_size": False}},
            "data": {
                "type": "array",
                "minItems": count,
                "maxItems": count,
                "items": element,
            },
        },
    }


def declared_tensor(
    spec: TensorSpec,
    listed_sizes: int,
    bounds: Mapping[str, Any],
    sizes: Sequence[tuple[int, int | None]] = (),
) -> dict[str, Any] | None:
    """The exact schema of ``spec`` as a JSON tensor (elements within ``bounds``, axes
    within ``sizes``, see :mod:`servinglib.wire.tensor_bounds`), or None when it has several
    ``-1`` dimensions (too many shapes to list) or no shape its sizes allow."""
    shape = _pinned(spec.shape, sizes)
    free = [i for i, dimension in enumerate(shape) if dimension == -1]
    if len(free) > 1:
        return None
    shapes = (
        [shape]
        if not free
        else [
            tuple(size if dimension == -1 else dimension for dimension in shape)
            for size in range(1, listed_sizes + 1)
        ]
    )
    variants = [_tensor(spec, shape, bounds) for shape in shapes if _fits(shape, sizes)]
    if not variants:
        return None
    if not free:
        return variants[0]
    return {
        "description": f"{spec.name}: shape {list(spec.shape)}; sizes 1 to {listed_sizes} of "
        "the -1 dimension are listed here, larger ones are accepted up to "
        "server.max_tensor_elements",
        "oneOf": variants,
    }


def _pinned(shape: Sequence[int], sizes: Sequence[tuple[int, int | None]]) -> tuple[int, ...]:
    """``shape`` with each ``-1`` the sizes allow one value for (1 to 1 rows) set to it."""
    pinned = list(shape)
    offset = len(shape) - len(sizes)  # sizes bound the innermost axes
    for level, (low, high) in enumerate(sizes):
        axis = offset + level
        if 0 <= axis < len(pinned) and pinned[axis] == -1 and low == high and low > 0:
            pinned[axis] = low
    return tuple(pinned)


def _fits(shape: Sequence[int], sizes: Sequence[tuple[int, int | None]]) -> bool:
    """Whether ``shape``'s innermost axes are within ``sizes`` (see check_dimensions)."""
    try:
        check_dimensions(tuple(shape), tuple(sizes), "")
    except InvalidInputError:
        return False
    return True


def declared_inputs(
    specs: Sequence[TensorSpec],
    listed_sizes: int,
    input_schema: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The ``inputs`` list of a request to a model declaring ``specs``: each declared input
    exactly once, in any order; None when an input's shapes are too many to list."""
    tensors = [
        declared_tensor(
            spec,
            listed_sizes,
            element_bounds(input_schema, spec.name),
            dimension_bounds(input_schema, spec.name),
        )
        for spec in specs
    ]
    if not specs or any(tensor is None for tensor in tensors):
        return None
    listed: dict[str, Any] = {"type": "array", "minItems": len(specs), "maxItems": len(specs)}
    if len(tensors) == 1:  # the usual model: one input, and the simplest schema
        return listed | {"items": tensors[0]}
    # each declared name once (a name twice is a 400): with as many items as inputs, every
    # name present means no name repeated
    return listed | {
        "items": {"oneOf": tensors},
        "allOf": [{"contains": {"properties": {"name": {"const": s.name}}}} for s in specs],
    }


def declared_outputs(specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """The ``outputs`` list of a request: names among the declared outputs (others are a 400)."""
    return {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"enum": [spec.name for spec in specs]}},
        },
    }
