"""The columns of a batch output, fixed before the first row from the self-test outputs.

Every part of a job, whichever engine or worker writes it, has the same schema: the id
column (when the input has one), one column per top-level output key (numbers, strings,
booleans and numeric arrays keep their type; anything else is JSON text), ``model``,
``version`` and ``error`` (null on success). A row whose output breaks that layout, or holds
NaN or Infinity (which ``/infer`` refuses to send), gets an error instead of an output.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from servinglib.batch._features import non_finite_rows
from servinglib.errors import ConfigError
from servinglib.wire.jsonbytes import NonFiniteError, dumps, to_plain

__all__ = ["JSON_COLUMNS_KEY", "OUTPUT_COLUMN", "RESERVED", "OutputLayout"]

JSON_COLUMNS_KEY = b"servinglib.json_columns"
OUTPUT_COLUMN = "output"  # the one column of outputs that are not objects
RESERVED = ("model", "version", "error")


def _typed(value: Any) -> pa.DataType | None:
    """The Arrow type a self-test output value keeps, or None to store it as JSON text."""
    plain = to_plain(value)
    if isinstance(plain, bool):
        return pa.bool_()
    if isinstance(plain, int):
        return pa.int64()
    if isinstance(plain, float):
        return pa.float64()
    if isinstance(plain, str):
        return pa.string()
    if isinstance(plain, list) and plain:
        try:
            datatype = pa.array([plain]).type
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None
        inner = datatype
        while pa.types.is_list(inner):
            inner = inner.value_type
        if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
            return datatype  # an integer array stays integer: its dtype is fixed by the model
        if pa.types.is_floating(inner) or pa.types.is_integer(inner):
            return _widen(datatype)
    return None


def _widen(datatype: pa.DataType) -> pa.DataType:
    """Integers in numeric arrays become float64: a later row may hold a fraction."""
    if pa.types.is_list(datatype):
        return pa.list_(_widen(datatype.value_type))
    return pa.float64()


@dataclass(frozen=True)
class OutputLayout:
    """Output columns and their types; ``None`` marks a column of JSON text."""

    keyed: bool  # outputs are objects: one column per key
    columns: tuple[tuple[str, str | None], ...]  # (name, Arrow type as text or None)
    id_column: str | None = None
    id_type: str | None = None  # an Arrow type alias (pa.type_for_alias)

    @classmethod
    def from_example(
        cls, output: Any, id_column: str | None, id_type: str | None = None
    ) -> OutputLayout:
        """The layout of outputs like ``output`` (a self-test output)."""
        if isinstance(output, Mapping):
            columns = tuple((str(k), _type_name(_typed(v))) for k, v in output.items())
            clash = [name for name, _ in columns if name in (*RESERVED, id_column)]
            if clash:
                raise ConfigError(
                    f"output key(s) {clash} clash with the columns batch-predict adds "
                    f"({', '.join(RESERVED)} and the id column); rename them"
                )
            return cls(True, columns, id_column, id_type)
        return cls(False, ((OUTPUT_COLUMN, _type_name(_typed(output))),), id_column, id_type)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the manifest keeps it, Ray actors receive it)."""
        return {
            "keyed": self.keyed,
            "columns": [list(c) for c in self.columns],
            "id_column": self.id_column,
            "id_type": self.id_type,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> OutputLayout:
        """Inverse of :meth:`to_dict`."""
        columns = tuple((c[0], c[1]) for c in raw["columns"])
        return cls(raw["keyed"], columns, raw["id_column"], raw.get("id_type"))

    def schema(self) -> pa.Schema:
        """The Arrow schema of every part."""
        return self._schema

    @cached_property
    def _schema(self) -> pa.Schema:  # built once: every chunk's table needs it
        id_type = pa.type_for_alias(self.id_type) if self.id_type else pa.null()
        fields = [pa.field(self.id_column, id_type)] if self.id_column else []
        fields += [pa.field(name, _type(t) if t else pa.string()) for name, t in self.columns]
        fields += [pa.field(name, pa.string()) for name in RESERVED]
        json_columns = [name for name, t in self.columns if t is None]
        return pa.schema(fields, metadata={JSON_COLUMNS_KEY: json.dumps(json_columns).encode()})

    def table(
        self,
        ids: pa.Array | None,
        outputs: Sequence[Any],
        errors: list[str | None],
        model: str,
        version: str,
    ) -> pa.Table:
        """The output rows of one batch (``outputs[i]`` is ignored where ``errors[i]`` is set)."""
        rows = len(errors)
        exact = self._exact_columns(outputs, errors) if self.keyed else None
        if self.keyed and exact is None:
            self._check_keys(outputs, errors)
        schema = self.schema()
        if self.id_column and ids is not None and ids.type != schema.field(self.id_column).type:
            ids = ids.cast(schema.field(self.id_column).type)
        arrays: list[pa.Array] = [ids] if self.id_column and ids is not None else []
        clean = errors.count(None) == rows  # no row failed yet: no per-row error checks
        for j, (name, type_name) in enumerate(self.columns):
            if exact is not None:
                values = exact[j]
            elif self.keyed and clean:
                values = [output.get(name) for output in outputs]
            elif self.keyed:
                values = [None if errors[i] else outputs[i].get(name) for i in range(rows)]
            elif clean:
                values = list(outputs)
            else:
                values = [None if errors[i] else outputs[i] for i in range(rows)]
            arrays.append(self._column(name, type_name, values, errors))
        # a later column may have failed a row whose earlier columns were filled: blank them
        start = 1 if self.id_column and ids is not None else 0
        clean = errors.count(None) == rows
        if not clean:
            failed = pa.array([e is not None for e in errors], pa.bool_())
            for j in range(start, len(arrays)):
                arrays[j] = pc.if_else(failed, pa.scalar(None, arrays[j].type), arrays[j])
        arrays.append(pa.repeat(pa.scalar(model, pa.string()), rows))
        arrays.append(pa.repeat(pa.scalar(version, pa.string()), rows))
        arrays.append(pa.nulls(rows, pa.string()) if clean else pa.array(errors, pa.string()))
        return pa.Table.from_arrays(arrays, schema=schema)

    def _exact_columns(
        self, outputs: Sequence[Any], errors: list[str | None]
    ) -> list[list[Any]] | None:
        """Each column's values when every row answered a dict of exactly the columns' keys.

        The common case, checked at C speed: as many keys as columns, and each column's key
        present, leave no room for another key. None otherwise (:meth:`_check_keys` then
        finds the rows at fault).
        """
        if (
            not outputs
            or errors.count(None) != len(errors)
            or set(map(type, outputs)) != {dict}
            or set(map(len, outputs)) != {len(self.columns)}
        ):
            return None
        try:
            return [[output[name] for output in outputs] for name, _ in self.columns]
        except KeyError:
            return None

    def _check_keys(self, outputs: Sequence[Any], errors: list[str | None]) -> None:
        keys = {name for name, _ in self.columns}
        if all(type(output) is dict for output in outputs) and all(map(keys.issuperset, outputs)):
            return  # the common case, in two passes at C speed
        for row, output in enumerate(outputs):
            if errors[row] is not None:
                continue
            if type(output) is dict and keys.issuperset(output):
                continue  # the common case, without the cost of an ABC isinstance check
            if not isinstance(output, Mapping):
                errors[row] = (
                    f"output error: the model returned {type(output).__name__}, not an object"
                )
            elif not keys.issuperset(output):
                errors[row] = (
                    f"output error: key(s) {sorted(set(output) - keys)} are not among the keys "
                    f"of the self-test outputs {sorted(keys)}"
                )

    def _column(
        self, name: str, type_name: str | None, values: list[Any], errors: list[str | None]
    ) -> pa.Array:
        if type_name is None:
            return pa.array(
                [self._json(v, name, i, errors) for i, v in enumerate(values)], pa.string()
            )
        datatype = _type(type_name)
        try:
            column = _stacked(values, datatype)
            if column is None:
                column = pa.array(values, datatype)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            try:
                column = pa.array([to_plain(v) for v in values], datatype)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                column = self._column_row_by_row(name, datatype, values, errors)
        for row in np.flatnonzero(non_finite_rows(column)):
            errors[row] = errors[row] or (
                f"output error: {name} holds NaN or Infinity, which JSON answers cannot carry"
            )
        return column

    @staticmethod
    def _column_row_by_row(
        name: str, datatype: pa.DataType, values: list[Any], errors: list[str | None]
    ) -> pa.Array:
        kept: list[Any] = []
        for i, value in enumerate(values):
            try:
                pa.array([to_plain(value)], datatype)
                kept.append(to_plain(value))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                errors[i] = errors[i] or (
                    f"output error: {name}={_short(value)} is not {datatype} like the "
                    "self-test outputs"
                )
                kept.append(None)
        return pa.array(kept, datatype)

    @staticmethod
    def _json(value: Any, name: str, row: int, errors: list[str | None]) -> str | None:
        if value is None:
            return None
        try:
            return dumps(value).decode()
        except NonFiniteError:
            errors[row] = errors[row] or (
                f"output error: {name} holds NaN or Infinity, which JSON answers cannot carry"
            )
        except TypeError as e:
            errors[row] = errors[row] or f"output error: {name} is not JSON serialisable: {e}"
        return None


def _stacked(values: list[Any], datatype: pa.DataType) -> pa.Array | None:
    """A list column from same-shaped NumPy arrays in one copy (None rows: zeros, nulled later)."""
    if not pa.types.is_list(datatype):
        return None
    first = next((v for v in values if v is not None), None)
    if type(first) is not np.ndarray or not first.shape:
        return None
    shape, dtype = first.shape, first.dtype
    if not all(v is None or (type(v) is np.ndarray and v.shape == shape) for v in values):
        return None
    if any(v is None for v in values):
        blank = np.zeros(shape, dtype=dtype)
        values = [blank if v is None else v for v in values]
    # one concatenate along axis 0 (same shapes), not np.stack's new axis per array
    stacked = np.concatenate(values).reshape(len(values), *shape)
    leaf = datatype
    while pa.types.is_list(leaf):
        leaf = leaf.value_type
    column: pa.Array = pa.array(stacked.reshape(-1)).cast(leaf)
    for size in reversed(shape):
        column = pa.FixedSizeListArray.from_arrays(column, size)
    return column.cast(datatype)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(datatype: pa.DataType | None) -> str | None:
    return None if datatype is None else str(datatype)


_TYPES = {"bool": pa.bool_(), "int64": pa.int64(), "double": pa.float64(), "string": pa.string()}


def _type(name: str) -> pa.DataType:
    """Parse the type names :func:`_typed` produces (``list<item: double>`` nests)."""
    if name in _TYPES:
        return _TYPES[name]
    if name.startswith("list<") and name.endswith(">"):
        inner = name[len("list<") : -1].split(": ", 1)[-1]
        return pa.list_(_type(inner))
    raise ConfigError(f"unknown output column type {name!r} in a batch manifest")
