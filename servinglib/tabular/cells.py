"""Cells -> one typed Arrow column, a cell that cannot be read failing only its own row.

CSV cells are text: :func:`parse_text` reads them as the declared JSON type (``12`` as a
number, ``true`` as a boolean, ``[1, 2]`` under an array as JSON). JSON Lines cells are
JSON values already: :func:`from_values` checks each against the declared type and builds
the column. A cell that does not fit becomes null and gets a message worded as ``/infer``
words the same value (``'twelve' is not of type 'number'``), from the field's own schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import jsonschema
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Refusals", "from_values", "parse_text", "refusal"]

Refusals = dict[int, str]  # row -> message


@lru_cache(maxsize=256)
def _validator(schema_json: bytes) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(orjson.loads(schema_json))


def refusal(name: str, value: Any, schema: Any, fallback: str) -> str:
    """The ``/infer`` message for ``value`` in field ``name`` (``fallback`` when it is valid)."""
    message, path = fallback, [name]
    if isinstance(schema, Mapping):
        try:
            validator = _validator(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))
            error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        except (TypeError, orjson.JSONEncodeError):
            error = None
        if error is not None:
            message = error.message
            path += [str(p) for p in error.absolute_path]
    return f"invalid input: features.{'.'.join(path)}: {message}"


def _type_message(value: Any, json_type: str) -> str:
    return f"{value!r} is not of type {json_type!r}"


def _fits(value: Any, json_type: str | None) -> bool:
    if value is None or json_type is None:
        return True
    if json_type == "string":
        return isinstance(value, str)
    if json_type == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if json_type == "number":
        return isinstance(value, int | float)
    if json_type == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if json_type == "array":
        return isinstance(value, list)
    if json_type == "object":
        return isinstance(value, dict)
    return True


def _arrow_type(values: Sequence[Any], json_type: str) -> pa.DataType | None:
    if json_type == "string":
        return pa.string()
    if json_type == "boolean":
        return pa.bool_()
    if json_type == "integer":
        return pa.int64()
    if json_type == "number":  # integers stay integers, as JSON parsing keeps them
        whole = all(v is None or isinstance(v, int) for v in values)
        return pa.int64() if whole else pa.float64()
    return None  # arrays and objects: inferred from the values


def from_values(
    values: list[Any], json_type: str | None, name: str, schema: Any = None
) -> tuple[pa.Array, Refusals]:
    """The column of JSON ``values`` of field ``name`` (None cells become nulls).

    Values of another type than ``json_type``, or that no column could hold with the rest
    (a string among numbers of an undeclared field, an integer past 64 bits), become null
    and are refused.
    """
    refused: Refusals = {}
    for row, value in enumerate(values):
        if json_type is not None and not _fits(value, json_type):
            refused[row] = refusal(name, value, schema, _type_message(value, json_type))
    clean = [None if row in refused else v for row, v in enumerate(values)] if refused else values
    if json_type == "integer" and any(isinstance(v, float) for v in clean):
        clean = [int(v) if isinstance(v, float) else v for v in clean]  # 2.0 is an integer
    target = _arrow_type(clean, json_type) if json_type else None
    if target == pa.float64() and any(isinstance(v, int) and abs(v) >= 2**63 for v in clean):
        clean = [float(v) if isinstance(v, int) else v for v in clean]  # as JSON reads 2**64
    try:
        return pa.array(clean, type=target), refused
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        pass
    # one cell spoils the column: keep the type of the first cell that converts
    first: pa.DataType | None = target
    kept: list[Any] = []
    for row, value in enumerate(clean):
        try:
            cell = pa.array([value], type=first)
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            refused[row] = refusal(
                name, value, schema, f"{value!r} cannot share a column with the other rows' values"
            )
            kept.append(None)
            continue
        if first is None and value is not None:
            first = cell.type
        kept.append(value)
    return pa.array(kept, type=first), refused


def parse_text(
    array: pa.Array, json_type: str | None, name: str, schema: Any = None
) -> tuple[pa.Array, Refusals]:
    """CSV text cells of field ``name`` as ``json_type`` (None: the type every cell fits)."""
    if pa.types.is_null(array.type) or json_type == "string":
        return array, {}
    if json_type in ("array", "object"):
        return _parse_json_cells(array, json_type, name, schema)
    if json_type is None:
        for kind in ("integer", "number", "boolean"):
            typed = _cast_all(array, kind)
            if typed is not None:
                return typed, {}
        return array, {}
    typed = _cast_all(array, json_type)
    if typed is not None:
        return typed, {}
    return from_values(
        [_text_value(v, json_type) for v in array.to_pylist()], json_type, name, schema
    )


def _cast_all(array: pa.Array, json_type: str) -> pa.Array | None:
    """Every cell of ``array`` cast to ``json_type`` at once, or None when one does not fit.

    Numbers go through float64 first: a failing cast costs ~100 times a successful one, so
    a column of decimals never tries int64 and fails. A number column whose cells are all
    written as integers stays int64, as JSON parsing keeps 12 an integer.
    """
    if json_type == "boolean":
        lower = pc.utf8_lower(array)
        true, false = pc.equal(lower, "true"), pc.equal(lower, "false")
        return true if pc.all(pc.or_(true, false)).as_py() in (True, None) else None
    if json_type not in ("number", "integer") or not _first_is_number(array):
        return None
    try:
        floats = pc.cast(array, pa.float64())
    except pa.ArrowInvalid:
        return None
    values = floats.to_numpy(zero_copy_only=False)
    present = values[~np.isnan(values)] if floats.null_count else values
    whole = bool(np.all(np.isfinite(present)) and np.all(present == np.round(present)))
    if json_type == "integer":
        return pc.cast(floats, pa.int64()) if whole else None
    written_whole = whole and not any(
        pc.any(pc.match_substring(array, marker)).as_py() for marker in (".", "e", "E")
    )
    if written_whole and (not len(present) or np.abs(present).max() < 2**53):
        return pc.cast(floats, pa.int64())
    return floats


def _first_is_number(array: pa.Array) -> bool:
    """Whether the first non-null cell reads as a number (else no cast is worth trying)."""
    for text in array.drop_null()[:1].to_pylist():
        try:
            float(text)
        except ValueError:
            return False
    return True


def _text_value(text: str | None, json_type: str) -> Any:
    """What a CSV cell holds read as ``json_type``: its number or boolean, else the text."""
    if text is None:
        return None
    stripped = text.strip()
    if json_type == "boolean":
        return {"true": True, "false": False}.get(stripped.lower(), text)
    for parse in (int, float):
        try:
            return parse(stripped)
        except ValueError:
            continue
    return text


def _parse_json_cells(
    array: pa.Array, json_type: str, name: str, schema: Any
) -> tuple[pa.Array, Refusals]:
    values: list[Any] = []
    refused: Refusals = {}
    for row, text in enumerate(array.to_pylist()):
        try:
            values.append(None if text is None else orjson.loads(text))
        except orjson.JSONDecodeError:
            values.append(None)
            refused[row] = refusal(name, text, schema, _type_message(text, json_type))
    column, more = from_values(values, json_type, name, schema)
    return column, {**more, **refused}
