"""Which columns of a data file become features, and the JSON type each one must hold.

The model's ``input_schema`` says which fields exist (``properties``), which must be there
(``required``) and their types. Columns it does not declare (ids, labels, timestamps) are
not features: :func:`plan_columns` leaves them out and names them, so the caller can warn;
``--columns`` chooses the feature columns explicitly instead. A required field without a
column is refused here, before a model loads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from servinglib.errors import ConfigError

__all__ = ["SCALAR_TYPES", "ColumnPlan", "plan_columns"]

SCALAR_TYPES = ("number", "integer", "boolean", "string")


@dataclass(frozen=True)
class ColumnPlan:
    """The columns one job reads and what each must hold.

    Attributes:
        features: the feature columns, in file order; None when the file has no header to
            choose from (JSON Lines without declared properties): every key is a feature.
        id_column: a column carried beside the features, never one of them.
        types: the JSON type of each declared feature with one type (``number`` ...).
        schemas: the ``input_schema`` of each declared feature, to word refusals as
            ``/infer`` does.
        nullable: declared features whose schema admits null (a null elsewhere is a
            missing value: the key is left out of the row's features).
        required: the features ``input_schema`` requires.
        dropped: columns of the file that are not read (undeclared, or not chosen).
        text_column: the column holding each row's features as JSON text, if any.
    """

    features: tuple[str, ...] | None = None
    id_column: str | None = None
    types: Mapping[str, str] = field(default_factory=dict)
    schemas: Mapping[str, Any] = field(default_factory=dict)
    nullable: frozenset[str] = frozenset()
    required: frozenset[str] = frozenset()
    dropped: tuple[str, ...] = ()
    text_column: str | None = None

    @property
    def columns(self) -> tuple[str, ...] | None:
        """Every column read (id first), or None for all of them."""
        if self.text_column is not None:
            return tuple(c for c in (self.id_column, self.text_column) if c is not None)
        if self.features is None:
            return None
        return (self.id_column, *self.features) if self.id_column else self.features

    def json_type(self, name: str) -> str | None:
        """The declared JSON type of column ``name`` (None: undeclared or several types)."""
        return self.types.get(name)


def _declared(input_schema: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if not isinstance(input_schema, Mapping) or input_schema.get("type") not in (None, "object"):
        return None
    properties = input_schema.get("properties")
    return properties if isinstance(properties, Mapping) and properties else None


def _type_of(schema: Any) -> tuple[str | None, bool]:
    """The one non-null JSON type ``schema`` declares (or None) and whether null is allowed."""
    if not isinstance(schema, Mapping) or "type" not in schema:
        return None, True
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    others = [k for k in kinds if k != "null"]
    return (others[0] if len(others) == 1 else None), "null" in kinds or not others


def plan_columns(
    columns: Sequence[str] | None,
    input_schema: Mapping[str, Any] | None,
    *,
    source: str,
    model: str = "",
    id_column: str | None = None,
    chosen: Sequence[str] | None = None,
    text_column: str | None = None,
) -> ColumnPlan:
    """Choose the feature columns of a file whose columns are ``columns`` (None: unknown).

    Args:
        columns: the file's columns in order (None for JSON Lines, which has no header).
        input_schema: the model's ``input_schema`` (None: every column is a feature).
        source: the file, for messages.
        model: the model's name, for messages.
        id_column: carried to the output, never a feature.
        chosen: the feature columns named with ``--columns`` (None: from ``input_schema``).
        text_column: a column holding the features as JSON text (``--features-column``).

    Raises:
        ConfigError: a required feature, a chosen column or the id column is missing,
            naming it, the file and its columns.
    """
    whose = f"model {model!r}" if model else "the model"
    known = list(columns) if columns is not None else None
    for option, name in (
        ("--id-column", id_column),
        ("--features-column", text_column),
        *(("--columns", c) for c in chosen or ()),
    ):
        if name is not None and known is not None and name not in known:
            raise ConfigError(
                f"{source} has no column {name!r} ({option}); its columns are {known}"
            )
    if text_column is not None:
        return ColumnPlan(id_column=id_column, text_column=text_column)
    properties = _declared(input_schema)
    types: dict[str, str] = {}
    nullable = set()
    for name, schema in (properties or {}).items():
        kind, allows_null = _type_of(schema)
        if kind is not None:
            types[str(name)] = kind
        if allows_null:
            nullable.add(str(name))
    required = frozenset(
        str(r) for r in (input_schema or {}).get("required", ()) if isinstance(r, str)
    )
    schemas = {str(k): v for k, v in (properties or {}).items()}
    if chosen is not None:
        features: tuple[str, ...] | None = tuple(c for c in chosen if c != id_column)
    elif known is None:
        features = tuple(schemas) if properties is not None else None
    elif properties is not None and not _keeps_extras(input_schema):
        features = tuple(c for c in known if c in schemas and c != id_column)
    else:
        features = tuple(c for c in known if c != id_column)
    missing = sorted(required - set(features or required)) if known is not None else []
    if missing:
        there = [m for m in missing if m in known]  # type: ignore[operator]
        fix = (
            f"add {there} to --columns"
            if there
            else "add the column, or score with a model whose input_schema does not require it"
        )
        raise ConfigError(
            f"{source} has no column {missing[0]!r}, which {whose} requires "
            f"(input_schema.required: {sorted(required)}); its columns are {known}; {fix}"
        )
    dropped = tuple(
        c for c in known or () if c != id_column and features is not None and c not in features
    )
    return ColumnPlan(
        features, id_column, types, schemas, frozenset(nullable), required, dropped, None
    )


def _keeps_extras(input_schema: Mapping[str, Any] | None) -> bool:
    """Whether the schema asks for undeclared fields too (``additionalProperties`` set)."""
    extra = (input_schema or {}).get("additionalProperties", False)
    return extra is not False
