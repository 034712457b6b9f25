"""The rows of a batch output by key, and the key a request names (``runtime: precomputed``).

A key column holds integers or strings (or, rarely, floats). A request's key is compared
by value and type: ``true`` never matches 1, ``"1"`` never matches 1, and a key that no
row could hold (a list, an object, NaN, an integer beyond 64 bits) is refused with 400
rather than looked up. Open Inference requests carry the key as a one-element tensor
(``BYTES`` for strings).
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.errors import InvalidInputError, ModelLoadError

__all__ = ["KeyKind", "LookupTable", "request_key"]

KeyKind = str  # "integer", "string" or "float"
_ADDED = ("model", "version", "error")  # columns batch-predict adds around the outputs
_INT64 = (-(2**63), 2**63 - 1)
_EXACT_FLOAT = 2**53  # past it, a float key (a JSON parser's big integer) is not one integer
_DATATYPES = {"integer": "INT64", "string": "BYTES", "float": "FP64"}


def request_key(value: Any, name: str, kind: KeyKind) -> Any:
    """The key ``value`` as the key column holds it.

    Raises:
        InvalidInputError: not one key of the column's type (400, naming ``name``).
    """
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise InvalidInputError(
                f"{name!r} holds {value.size} values (shape {list(value.shape)}); send one "
                "key per request, a tensor of shape [1]",
                field=name,
            )
        value = value.reshape(-1)[0]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInputError(f"{name!r} is not UTF-8 text", field=name) from None
    expected = {"integer": "an integer", "string": "a string", "float": "a number"}[kind]
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidInputError(
            f"{name!r} must be {expected} (the key column's type), not "
            f"{_json_type(value)}: {_preview(value)}",
            field=name,
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInputError(f"{name!r} is {value}; send a finite key", field=name)
    if kind == "string":
        if not isinstance(value, str):
            raise InvalidInputError(
                f"{name!r} must be a string (the key column holds strings), not {value!r}",
                field=name,
            )
        return value
    if isinstance(value, str):
        raise InvalidInputError(
            f"{name!r} must be {expected} (the key column holds numbers), not the string "
            f"{_preview(value)}",
            field=name,
        )
    if kind == "integer":
        if isinstance(value, float):
            if not value.is_integer() or abs(value) > _EXACT_FLOAT:
                raise InvalidInputError(
                    f"{name!r} is {value}; the key column holds integers (send it as an "
                    "integer; a float past 2^53 no longer names one)",
                    field=name,
                )
            value = int(value)
        if not _INT64[0] <= value <= _INT64[1]:
            raise InvalidInputError(
                f"{name!r} is {value}, beyond the 64-bit integers the key column holds",
                field=name,
            )
        return value
    return float(value)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class LookupTable:
    """Rows of a batch output by key: Parquet read into memory, SQLite queried per request.

    Raises:
        ModelLoadError: no key column, a key column of another type, or a key held by
            two rows (across parts too: which one a worker answered would be chance).
    """

    def __init__(self, path: Path, key: str) -> None:
        self.key = key
        self._lock = threading.Lock()
        self._rows: dict[Any, int] = {}
        self._sqlite: sqlite3.Connection | None = None
        self.booleans: set[str] = set()
        if path.suffix in (".sqlite", ".db"):
            self._open_sqlite(path)
        else:
            self._open_parquet(path)

    @property
    def datatype(self) -> str:
        """The key's Open Inference datatype."""
        return _DATATYPES[self.kind]

    def _open_parquet(self, path: Path) -> None:
        try:
            import pyarrow as pa
            import pyarrow.dataset as ds
        except ImportError as e:
            raise ModelLoadError(
                "runtime: precomputed reads Parquet with pyarrow; install it with "
                "pip install 'servinglib[batch]'"
            ) from e
        files = (
            sorted(str(p) for p in path.iterdir() if p.suffix == ".parquet")
            if path.is_dir()
            else [str(path)]
        )
        table = ds.dataset(files, format="parquet").to_table()
        if self.key not in table.column_names:
            raise ModelLoadError(
                f"{path} has no column {self.key!r} (runtime_options.key); its columns are "
                f"{table.column_names}"
            )
        key_type = table.schema.field(self.key).type
        if pa.types.is_integer(key_type):
            self.kind = "integer"
        elif pa.types.is_string(key_type) or pa.types.is_large_string(key_type):
            self.kind = "string"
        elif pa.types.is_floating(key_type):
            self.kind = "float"
        else:
            raise ModelLoadError(
                f"column {self.key!r} of {path} is {key_type}; a key column holds integers "
                "or strings"
            )
        metadata = table.schema.metadata or {}
        self.json_columns = set(json.loads(metadata.get(b"servinglib.json_columns", b"[]")))
        self.outputs = [c for c in table.column_names if c not in (self.key, *_ADDED)]
        self._columns = {name: table.column(name).to_pylist() for name in self.outputs}
        self._errors = table.column("error").to_pylist() if "error" in table.column_names else []
        keys = table.column(self.key).to_pylist()
        self._rows = {k: i for i, k in enumerate(keys) if k is not None}
        if len(self._rows) != sum(k is not None for k in keys):
            counted = Counter(k for k in keys if k is not None)
            twice = sorted(k for k, n in counted.items() if n > 1)
            raise ModelLoadError(
                f"{path}: {len(twice)} key(s) of column {self.key!r} are held by more than one "
                f"row (e.g. {twice[:3]}), across {len(files)} part(s); keep one row per key "
                "(a part left over from an earlier run?)"
            )

    def _open_sqlite(self, path: Path) -> None:
        self._sqlite = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        info = self._sqlite.execute("PRAGMA table_info(predictions)").fetchall()
        if not info:
            raise ModelLoadError(f"{path} has no table 'predictions'; write the batch output there")
        names = [row[1] for row in info]
        if self.key not in names:
            raise ModelLoadError(f"table predictions of {path} has no column {self.key!r}")
        declared = {row[1]: str(row[2]).upper() for row in info}
        self.json_columns = {name for name, kind in declared.items() if kind == "JSON"}
        self.booleans = {name for name, kind in declared.items() if "BOOL" in kind}
        self.outputs = [c for c in names if c not in (self.key, *_ADDED)]
        key = _quoted(self.key)
        types = {
            row[0]
            for row in self._sqlite.execute(
                f"SELECT DISTINCT typeof({key}) FROM predictions WHERE {key} IS NOT NULL"  # noqa: S608
            )
        }
        kinds = {"integer": "integer", "text": "string", "real": "float"}
        if len(types) > 1 or not types <= set(kinds):
            raise ModelLoadError(
                f"column {self.key!r} of {path} holds {sorted(types)} values; a key column "
                "holds integers or strings, one type"
            )
        self.kind = kinds[types.pop()] if types else "integer"
        twice = [
            row[0]
            for row in self._sqlite.execute(
                f"SELECT {key} FROM predictions WHERE {key} IS NOT NULL "  # noqa: S608
                f"GROUP BY {key} HAVING COUNT(*) > 1 LIMIT 3"
            )
        ]
        if twice:
            raise ModelLoadError(
                f"{path}: keys of column {self.key!r} are held by more than one row (e.g. "
                f"{twice}); keep one row per key"
            )
        # column names come from the file itself and are quoted; the key value is bound
        columns = ", ".join(_quoted(c) for c in self.outputs)
        error = "error" if "error" in names else "NULL"
        self._select = f"SELECT {columns}, {error} FROM predictions WHERE {key} = ?"  # noqa: S608

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, key: Any) -> dict[str, Any] | None:
        """The outputs of ``key``'s row (a key :func:`request_key` returned), or None."""
        if self._sqlite is not None:
            with self._lock:
                found = self._sqlite.execute(self._select, (key,)).fetchone()
            if found is None or found[-1] is not None:
                return None
            values = dict(zip(self.outputs, found[:-1], strict=True))
        else:
            row = self._rows.get(key)
            if row is None or (self._errors and self._errors[row] is not None):
                return None
            values = {name: self._columns[name][row] for name in self.outputs}
        return {name: self._decoded(name, v) for name, v in values.items()}

    def _decoded(self, name: str, value: Any) -> Any:
        if name in self.json_columns and isinstance(value, str):
            return json.loads(value)
        if name in self.booleans and isinstance(value, int):
            return bool(value)
        return value


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
