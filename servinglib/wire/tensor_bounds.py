"""Value bounds of a tensor input, taken from the model's ``input_schema``.

A model serving both protocols describes a feature once: the ``input_schema`` property named
like a declared tensor input bounds that tensor's elements too (``minimum``/``maximum`` of a
number, ``maxLength`` of a string, found through any ``items`` of arrays), and its sizes:
the ``minItems``/``maxItems`` of each nested array bound the tensor's axes, the innermost
array its last axis (so ``embedding: [384 numbers]`` bounds the last axis of a ``[1, 384]``
tensor). The Open Inference path checks them and the OpenAPI document states them, so a
schema-valid tensor is never one the model cannot answer.

Example::

    bounds = element_bounds({"properties": {"x": {"items": {"maximum": 9}}}}, "x")  # {"maximum": 9}
    check_bounds(np.array([10.0]), bounds, "input 'x' of model 'm'")               # raises
    sizes = dimension_bounds({"properties": {"x": {"maxItems": 4}}}, "x")          # ((0, 4),)
    check_dimensions((1, 5), sizes, "input 'x' of model 'm'")                      # raises
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from servinglib.errors import InvalidInputError

__all__ = ["check_bounds", "check_dimensions", "dimension_bounds", "element_bounds"]

_KEYS = ("minimum", "maximum", "maxLength")


def element_bounds(input_schema: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
    """The bounds ``input_schema`` gives the elements of property ``name`` (empty if none)."""
    if not input_schema:
        return {}
    leaf = input_schema.get("properties", {}).get(name)
    while isinstance(leaf, Mapping) and isinstance(leaf.get("items"), Mapping):
        leaf = leaf["items"]
    if not isinstance(leaf, Mapping):
        return {}
    return {
        key: leaf[key]
        for key in _KEYS
        if isinstance(leaf.get(key), int | float) and not isinstance(leaf.get(key), bool)
    }


def check_bounds(array: np.ndarray, bounds: Mapping[str, Any], where: str) -> None:
    """Refuse elements outside ``bounds`` (numbers by value, BYTES by decoded length).

    Raises:
        InvalidInputError: naming the tensor and the bound.
    """
    if not bounds or not array.size:
        return
    if array.dtype.kind in "iuf":
        low, high = bounds.get("minimum"), bounds.get("maximum")
        if low is not None and array.min() < low:
            raise InvalidInputError(f"{where} holds a value below its minimum {low}")
        if high is not None and array.max() > high:
            raise InvalidInputError(f"{where} holds a value above its maximum {high}")
    elif array.dtype == object and "maxLength" in bounds:
        limit = bounds["maxLength"]
        for value in array.reshape(-1):
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            if len(text) > limit:
                raise InvalidInputError(f"{where} holds a text longer than {limit} characters")


def dimension_bounds(
    input_schema: Mapping[str, Any] | None, name: str
) -> tuple[tuple[int, int | None], ...]:
    """``(minItems, maxItems)`` of each nested array of property ``name``, outermost first
    (``maxItems`` None where unbounded); empty if the property is not an array."""
    if not input_schema:
        return ()
    node = input_schema.get("properties", {}).get(name)
    sizes = []
    while isinstance(node, Mapping) and isinstance(node.get("items"), Mapping):
        low, high = node.get("minItems", 0), node.get("maxItems")
        sizes.append(
            (
                low if isinstance(low, int) and not isinstance(low, bool) else 0,
                high if isinstance(high, int) and not isinstance(high, bool) else None,
            )
        )
        node = node["items"]
    return tuple(sizes)


def check_dimensions(
    shape: tuple[int, ...], sizes: tuple[tuple[int, int | None], ...], where: str
) -> None:
    """Refuse a ``shape`` whose innermost axes fall outside ``sizes`` (innermost last).

    Raises:
        InvalidInputError: naming the tensor, the axis and the sizes allowed.
    """
    for level, (low, high) in enumerate(sizes):
        axis = len(shape) - len(sizes) + level
        if axis < 0:
            continue  # fewer axes than nested arrays: the shape check answers for those
        size = shape[axis]
        if size < low or (high is not None and size > high):
            allowed = f"at least {low}" if high is None else f"{low} to {high}"
            raise InvalidInputError(
                f"{where} has size {size} on axis {axis}; its input_schema allows {allowed}"
            )
