"""Rows of a record batch -> the ``features`` a model receives, under the online JSON rules.

Columns become the keys of ``features`` (struct columns nested objects, lists arrays), or
one column holds each row's features as JSON text (``--features-column``). Lists arrive as
Python lists, as from JSON; with ``numpy_lists`` (``--numpy-lists``), numeric list columns
without nulls arrive as NumPy arrays instead (views into the column, as the Open Inference
endpoint hands tensors in): converting them to Python lists can cost more than a vectorised
model takes to answer, but only models that accept arrays may use it. What an online
request could not carry is refused per row, as ``/infer`` refuses it with 400: NaN and
Infinity, nesting deeper than ``server.max_json_depth``, JSON text longer than
``server.max_request_body_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from servinglib.errors import ConfigError, InvalidInputError
from servinglib.tabular import READ_ERROR
from servinglib.wire.strict_json import parse_json

__all__ = ["FeatureRows", "FeatureSpec", "check_input_schema", "rows_to_features"]


@dataclass(frozen=True)
class FeatureSpec:
    """How rows become features: which column is the id, which (if any) holds JSON."""

    id_column: str | None = None
    features_column: str | None = None
    max_json_depth: int = 64
    max_json_bytes: int = 8 * 1024 * 1024
    numpy_lists: bool = False
    # declared features whose schema refuses null: a null cell is a missing value, left out
    # of the row's features (so input_schema words it "'x' is a required property")
    absent_if_null: frozenset[str] = frozenset()


@dataclass
class FeatureRows:
    """The features and per-row refusals of one record batch (ids stay in the Arrow column)."""

    features: list[Any]
    errors: list[str | None]
    columns: dict[str, pa.Array]  # the feature columns, for columnar validation


def _is_list(datatype: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(datatype)
        or pa.types.is_large_list(datatype)
        or pa.types.is_fixed_size_list(datatype)
    )


def _depth(datatype: pa.DataType) -> int:
    if pa.types.is_struct(datatype):
        return 1 + max(
            (_depth(datatype.field(i).type) for i in range(datatype.num_fields)), default=0
        )
    if _is_list(datatype):
        return 1 + _depth(datatype.value_type)
    return 0


def _json_like(datatype: pa.DataType) -> bool:
    if pa.types.is_dictionary(datatype):
        return _json_like(datatype.value_type)
    if pa.types.is_struct(datatype):
        return all(_json_like(datatype.field(i).type) for i in range(datatype.num_fields))
    if _is_list(datatype):
        return _json_like(datatype.value_type)
    return bool(
        pa.types.is_integer(datatype)
        or pa.types.is_floating(datatype)
        or pa.types.is_boolean(datatype)
        or pa.types.is_string(datatype)
        or pa.types.is_large_string(datatype)
        or pa.types.is_null(datatype)
    )


def check_input_schema(schema: pa.Schema, spec: FeatureSpec, source: str) -> None:
    """Refuse inputs whose columns cannot become JSON-like features, before scoring a row.

    Raises:
        ConfigError: naming the column, its type and the fix.
    """
    names = set(schema.names)
    for option, column in (
        ("--id-column", spec.id_column),
        ("--features-column", spec.features_column),
    ):
        if column is not None and column not in names:
            raise ConfigError(
                f"{source} has no column {column!r} ({option}); its columns are {schema.names}"
            )
    if spec.features_column is not None:
        datatype = schema.field(spec.features_column).type
        if not (pa.types.is_string(datatype) or pa.types.is_large_string(datatype)):
            raise ConfigError(
                f"{source}: --features-column {spec.features_column!r} has type {datatype}; "
                "it must hold JSON text (string)"
            )
        return
    for field in schema:
        if field.name in (spec.id_column, READ_ERROR):
            continue
        if not _json_like(field.type):
            raise ConfigError(
                f"{source}: column {field.name!r} has type {field.type}, which a JSON request "
                "cannot carry; cast it to a number, string, bool, list or struct, or pass "
                "--features-column with the features as JSON text"
            )
        if 1 + _depth(field.type) >= spec.max_json_depth:
            raise ConfigError(
                f"{source}: column {field.name!r} nests deeper than server.max_json_depth="
                f"{spec.max_json_depth}; flatten it"
            )


def non_finite_rows(array: pa.Array) -> np.ndarray:
    """A mask of the rows of ``array`` holding NaN or Infinity anywhere inside."""
    datatype = array.type
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_floating(datatype):
        if not array.null_count:  # NumPy on the values themselves: no mask to convert
            values = np.asarray(array.to_numpy(zero_copy_only=False))
            # NaN and Infinity carry into the sum: a finite sum (the common case) clears
            # every row in one pass, without a mask; an overflowing one is only re-checked
            with np.errstate(over="ignore", invalid="ignore"):
                total = values.sum()
            if np.isfinite(total):
                return np.zeros(len(array), dtype=bool)
            finite: np.ndarray = np.isfinite(values)
            return ~finite
        flags = pc.is_finite(array).fill_null(True)
        return ~np.asarray(flags.to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_struct(datatype):
        mask = np.zeros(len(array), dtype=bool)
        for i in range(datatype.num_fields):
            mask |= non_finite_rows(pc.struct_field(array, [i]))
        return mask
    if _is_list(datatype):
        inner = non_finite_rows(pc.list_flatten(array))
        mask = np.zeros(len(array), dtype=bool)
        if inner.any():
            parents = np.asarray(pc.list_parent_indices(array).to_numpy())
            mask[parents[inner]] = True
        return mask
    return np.zeros(len(array), dtype=bool)


def rows_to_features(batch: pa.RecordBatch, spec: FeatureSpec) -> FeatureRows:
    """Convert one record batch into features and the rows refused under the JSON rules."""
    read_errors = _read_errors(batch)
    if spec.features_column is not None:
        return _from_json_column(batch, spec, read_errors)
    names = [n for n in batch.schema.names if n not in (spec.id_column, READ_ERROR)]
    columns = {name: batch.column(name) for name in names}
    tensors = _tensor_rows(columns) if spec.numpy_lists else {}
    plain = [n for n in names if n not in tensors]
    features: list[Any]
    if not tensors:
        features = batch.select(plain).to_pylist()
    elif len(names) == 1:
        features = [{names[0]: value} for value in tensors[names[0]]]
    else:  # keep the column order of the input
        values = [tensors[n] if n in tensors else columns[n].to_pylist() for n in names]
        features = [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]
    errors: list[str | None] = read_errors
    for name, column in columns.items():
        if name in spec.absent_if_null and column.null_count:
            for row in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)).tolist():
                features[row].pop(name, None)
        bad = non_finite_rows(column)
        for row in np.flatnonzero(bad).tolist():
            errors[row] = errors[row] or (
                f"invalid input: features.{name} holds NaN or Infinity, which JSON requests "
                "cannot carry; send a number or null"
            )
    return FeatureRows(features, errors, columns)


def _tensor_rows(columns: dict[str, pa.Array]) -> dict[str, list[np.ndarray]]:
    """One NumPy view per row of each numeric list column without nulls (the rest: none)."""
    views: dict[str, list[np.ndarray]] = {}
    for name, column in columns.items():
        rows = _views(column)
        if rows is not None:
            views[name] = rows
    return views


def _values(array: pa.Array) -> np.ndarray | None:
    """``array`` as an n-dimensional NumPy array (fixed-size lists nest), or None."""
    if array.null_count:
        return None
    datatype = array.type
    if pa.types.is_integer(datatype) or pa.types.is_floating(datatype):
        return np.asarray(array.to_numpy(zero_copy_only=False))
    if pa.types.is_fixed_size_list(datatype):
        inner = _values(array.flatten())
        if inner is None:
            return None
        return inner.reshape(len(array), datatype.list_size, *inner.shape[1:])
    return None


def _views(column: pa.Array) -> list[np.ndarray] | None:
    if not (_is_list(column.type) and len(column)) or column.null_count:
        return None
    if pa.types.is_fixed_size_list(column.type):
        values = _values(column)
        return None if values is None else list(values)
    inner = _values(column.flatten())
    if inner is None:
        return None
    offsets = np.asarray(column.offsets.to_numpy()) - column.offsets[0].as_py()
    lengths = np.diff(offsets)
    if len(inner) == offsets[-1] and (lengths == lengths[0]).all():
        # every row as long: one reshape, then views made in C instead of a slice per row
        return list(inner[: offsets[-1]].reshape(len(column), int(lengths[0]), *inner.shape[1:]))
    return [inner[offsets[i] : offsets[i + 1]] for i in range(len(column))]


def _read_errors(batch: pa.RecordBatch) -> list[str | None]:
    """The reader's message for each row (a cell it could not read), else None."""
    index = batch.schema.get_field_index(READ_ERROR)
    if index < 0 or batch.column(index).null_count == batch.num_rows:
        return [None] * batch.num_rows
    errors: list[str | None] = batch.column(index).to_pylist()
    return errors


def _from_json_column(
    batch: pa.RecordBatch, spec: FeatureSpec, read_errors: list[str | None]
) -> FeatureRows:
    assert spec.features_column is not None
    texts = batch.column(spec.features_column).to_pylist()
    features: list[Any] = []
    errors: list[str | None] = []
    for text, read_error in zip(texts, read_errors, strict=True):
        if read_error is not None:
            features.append(None)
            errors.append(read_error)
            continue
        if text is None:
            features.append(None)
            errors.append(f"invalid input: column {spec.features_column!r} is null")
            continue
        if len(text) > spec.max_json_bytes:
            features.append(None)
            errors.append(
                f"invalid input: features JSON is longer than server.max_request_body_bytes="
                f"{spec.max_json_bytes}"
            )
            continue
        try:
            features.append(parse_json(text, spec.max_json_depth))
            errors.append(None)
        except InvalidInputError as e:
            features.append(None)
            errors.append(f"invalid input: {e}")
    return FeatureRows(features, errors, {})
