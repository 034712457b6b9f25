"""``input_schema`` validation of whole record batches, with the verdicts of ``/infer``.

Validating row by row with jsonschema costs tens of microseconds per row, more than many
models take to answer. For the schemas teams usually write (an object of numbers, strings,
booleans and arrays of them, with bounds), the checks are compiled to vectorised pyarrow
compute over the columns; a row the columns cannot vouch for (an unsupported keyword, a
null, a bound crossed) is validated with jsonschema, which also writes its message. So a
row is refused exactly when ``/infer`` would refuse it, with the same message.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["BatchValidator"]

_ANNOTATIONS = {"description", "title", "examples", "default", "$comment", "$schema", "deprecated"}
_PROPERTY_KEYS = _ANNOTATIONS | {
    "type",
    "items",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
}
_BOUNDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
_TOP_KEYS = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties"}


def _is_list(datatype: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(datatype)
        or pa.types.is_large_list(datatype)
        or pa.types.is_fixed_size_list(datatype)
    )


def _numeric(datatype: pa.DataType) -> bool:
    return bool(pa.types.is_integer(datatype) or pa.types.is_floating(datatype))


def _as_mask(result: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(result.fill_null(True).to_numpy(zero_copy_only=False), dtype=bool)


def _length_bounds(schema: Mapping[str, Any], suffix: str) -> dict[str, Any]:
    """``minLength``/``maxLength`` (or ``minItems``/``maxItems``) as numeric bounds."""
    bounds = {"minimum": schema.get("min" + suffix, 0)}
    if "max" + suffix in schema:
        bounds["maximum"] = schema["max" + suffix]
    return bounds


def _min_max(array: pa.Array) -> tuple[Any, Any]:
    """The least and greatest non-null, non-NaN value of ``array`` (None, None when none)."""
    if not array.null_count and len(array):
        values = np.asarray(array.to_numpy(zero_copy_only=False))
        low, high = values.min(), values.max()  # several times faster than pc.min_max
        if not (values.dtype.kind == "f" and (math.isnan(low) or math.isnan(high))):
            return low.item(), high.item()
    low, high = pc.min_max(array).values()  # skips nulls and NaN
    return low.as_py(), high.as_py()


def _within(array: pa.Array, schema: Mapping[str, Any]) -> bool:
    """Whether every non-null value of ``array`` meets its bounds, from its min and max alone."""
    low, high = _min_max(array)
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return False  # empty, all null, or all NaN: let the masks decide
    return (
        low >= schema.get("minimum", low)
        and high <= schema.get("maximum", high)
        and ("exclusiveMinimum" not in schema or low > schema["exclusiveMinimum"])
        and ("exclusiveMaximum" not in schema or high < schema["exclusiveMaximum"])
    )


def _bounds(array: pa.Array, schema: Mapping[str, Any], mask: np.ndarray) -> None:
    if not _BOUNDS.intersection(schema) or _within(array, schema):
        return  # the common case: one pass for min and max, no mask per bound
    for key, compare in (
        ("minimum", pc.less),
        ("maximum", pc.greater),
        ("exclusiveMinimum", pc.less_equal),
        ("exclusiveMaximum", pc.greater_equal),
    ):
        if key in schema:
            mask |= _as_mask(compare(array, schema[key]))


def _suspect(array: pa.Array, schema: Mapping[str, Any]) -> np.ndarray | None:
    """Rows of ``array`` the columns cannot vouch for; None when ``schema`` is unsupported."""
    if not isinstance(schema, Mapping) or set(schema) - _PROPERTY_KEYS:
        return None
    datatype = array.type
    kind = schema.get("type")
    if array.null_count:
        mask = np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    else:
        mask = np.zeros(len(array), dtype=bool)
    if (kind == "number" and _numeric(datatype)) or (
        kind == "integer" and pa.types.is_integer(datatype)
    ):
        _bounds(array, schema, mask)
    elif kind == "boolean" and pa.types.is_boolean(datatype):
        pass
    elif kind == "string" and (pa.types.is_string(datatype) or pa.types.is_large_string(datatype)):
        if "minLength" in schema or "maxLength" in schema:
            _bounds(pc.utf8_length(array), _length_bounds(schema, "Length"), mask)
    elif kind == "array" and _is_list(datatype):
        _bounds(pc.list_value_length(array), _length_bounds(schema, "Items"), mask)
        if "items" in schema:
            inner = _suspect(pc.list_flatten(array), schema["items"])
            if inner is None:
                return None
            if inner.any():
                parents = np.asarray(pc.list_parent_indices(array).to_numpy())
                mask[parents[inner]] = True
    else:
        return None
    return mask


def _plain(features: Any) -> Any:
    if isinstance(features, Mapping):
        return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in features.items()}
    return features


class BatchValidator:
    """Validates the features of a batch against ``input_schema`` (None: every row passes)."""

    def __init__(self, schema: Mapping[str, Any] | None) -> None:
        self._schema = schema
        self._validator = jsonschema.Draft202012Validator(schema) if schema is not None else None
        self._columnar = (
            schema is not None
            and not (set(schema) - _TOP_KEYS)
            and schema.get("type") == "object"
            and isinstance(schema.get("properties", {}), Mapping)
        )

    def _suspects(self, columns: Mapping[str, pa.Array], rows: int) -> np.ndarray:
        """Rows that need jsonschema; all of them unless the columns can vouch for the rest."""
        everything = np.ones(rows, dtype=bool)
        if not self._columnar or not columns or self._schema is None:
            return everything
        properties: Mapping[str, Any] = self._schema.get("properties", {})
        required = set(self._schema.get("required", ()))
        extra = set(columns) - set(properties)
        if (extra and self._schema.get("additionalProperties", True) is not True) or (
            required - set(columns)
        ):
            return everything  # jsonschema names the unexpected or missing key per row
        mask = np.zeros(rows, dtype=bool)
        for name, column in columns.items():
            if name in properties:
                suspect = _suspect(column, properties[name])
                if suspect is None:
                    return everything
                mask |= suspect
        return mask

    def errors(
        self, features: Sequence[Any], columns: Mapping[str, pa.Array], skip: Sequence[str | None]
    ) -> list[str | None]:
        """One message per row (None: valid), worded as ``/infer`` words its 400 answers.

        Rows whose ``skip`` entry is already an error are not validated again. jsonschema
        sees each row as JSON would carry it: NumPy arrays as lists.
        """
        out: list[str | None] = list(skip)
        if self._validator is None:
            return out
        suspects = self._suspects(columns, len(features))
        for row in np.flatnonzero(suspects).tolist():
            if out[row] is not None:
                continue
            error = jsonschema.exceptions.best_match(
                self._validator.iter_errors(_plain(features[row]))
            )
            if error is not None:
                path = [str(p) for p in error.absolute_path]
                where = "features." + ".".join(path) if path else "features"
                out[row] = f"invalid input: {where}: {error.message}"
        return out
