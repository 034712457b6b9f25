"""Features as typed Parquet columns: the lake's ``feature_<name>`` columns, per file.

A file holds one model version's records. When every record's features are a JSON object,
each feature whose values all have one scalar type becomes a column of that type: the type
the model's ``input_schema`` declares for it (``boolean``, ``integer``, ``number``,
``string``), else the type its values in the file share (integers and floats together:
``double``). The other features (arrays, objects, mixed types) stay JSON text in the
``inputs`` column, which is null when every feature of a record has a column.
:func:`features_of` puts a record's features back together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["FEATURE_PREFIX", "FlatFeatures", "features_of", "flatten"]

FEATURE_PREFIX = "feature_"
_DECLARED = {"boolean": "bool", "integer": "int64", "number": "double", "string": "string"}
_INT64 = (-(2**63), 2**63)


def _kind(value: Any) -> str | None:
    """The column type a JSON value fits, or None (it stays JSON)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64" if _INT64[0] <= value < _INT64[1] else None
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    return None


def _declared(input_schema: Mapping[str, Any] | None) -> dict[str, str]:
    """Column types of the scalar properties ``input_schema`` declares (``null`` allowed)."""
    properties = (input_schema or {}).get("properties")
    if not isinstance(properties, Mapping):
        return {}
    kinds: dict[str, str] = {}
    for name, spec in properties.items():
        declared = spec.get("type") if isinstance(spec, Mapping) else None
        types = [declared] if isinstance(declared, str) else list(declared or [])
        scalar = [t for t in types if t != "null"]
        if len(scalar) == 1 and scalar[0] in _DECLARED:
            kinds[str(name)] = _DECLARED[scalar[0]]
    return kinds


def _column_kind(values: Iterable[Any], declared: str | None) -> str | None:
    """The type every non-null value fits (``declared`` first), or None."""
    kinds = {_kind(value) for value in values if value is not None}
    if declared is not None:
        fits = {declared, "int64"} if declared == "double" else {declared}
        return declared if kinds <= fits else None
    if kinds == {"int64", "double"}:
        return "double"
    return next(iter(kinds)) if len(kinds) == 1 and None not in kinds else None


class FlatFeatures:
    """The feature columns of one file and what is left as JSON, record by record.

    ``columns``: column name → (type: ``bool``, ``int64``, ``double`` or ``string``,
    values); ``rest``: per record, the features without a column (None: none left).
    """

    def __init__(self, columns: dict[str, tuple[str, list[Any]]], rest: list[Any]) -> None:
        self.columns = columns
        self.rest = rest


def flatten(features: Sequence[Any], input_schema: Mapping[str, Any] | None) -> FlatFeatures:
    """Split the ``features`` of a file's records into typed columns and JSON leftovers."""
    if not features or not all(isinstance(f, Mapping) for f in features):
        return FlatFeatures({}, list(features))
    declared = _declared(input_schema)
    names = list(dict.fromkeys(str(k) for record in features for k in record))
    columns: dict[str, tuple[str, list[Any]]] = {}
    for name in names:
        values = [record.get(name) for record in features]
        kind = _column_kind(values, declared.get(name))
        if kind is not None:
            if kind == "double":
                values = [None if v is None else float(v) for v in values]
            columns[name] = (kind, values)
    rest = [{k: v for k, v in record.items() if k not in columns} or None for record in features]
    return FlatFeatures(
        {f"{FEATURE_PREFIX}{name}": column for name, column in columns.items()}, rest
    )


def features_of(inputs: Any, flat: Mapping[str, Any]) -> Any:
    """A record's features from its ``inputs`` (decoded JSON, None) and its
    ``feature_<name>`` column values (a null value: the record had no such feature)."""
    present = {
        name.removeprefix(FEATURE_PREFIX): value
        for name, value in flat.items()
        if value is not None
    }
    if inputs is None:
        return present
    if not present:
        return inputs
    return {**present, **inputs}
