"""A whole data file as feature rows (dicts), as ``batch-predict`` would hand them in."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from servinglib.errors import ConfigError
from servinglib.tabular.plan import ColumnPlan, plan_columns
from servinglib.tabular.reader import READ_ERROR, header_columns, read_batches

__all__ = ["FORMATS", "FeatureTable", "format_of", "read_feature_rows"]

FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".jsonl": "json",
    ".json": "json",
}


@dataclass(frozen=True)
class FeatureTable:
    """The feature rows of a file, the reader's message per row (None: read) and the plan."""

    rows: list[dict[str, Any]]
    errors: list[str | None]
    plan: ColumnPlan


def format_of(path: Path) -> str:
    """``parquet``, ``csv`` or ``json`` from the file's suffix.

    Raises:
        ConfigError: for any other suffix.
    """
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ConfigError(
            f"{path}: unknown data format {path.suffix!r}; use .parquet, .csv or .jsonl"
        )
    return fmt


def _plain(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def read_feature_rows(
    path: Path,
    input_schema: Mapping[str, Any] | None,
    *,
    model: str = "",
    columns: Sequence[str] | None = None,
    batch_rows: int = 8192,
) -> FeatureTable:
    """Every row of ``path`` as the features a model receives (undeclared columns left out).

    A null cell of a feature whose schema refuses null is left out of its row (a missing
    value); NaN is a missing value too.

    Raises:
        ConfigError: unknown suffix, a required feature without a column;
        InputFileError: the file cannot be read.
    """
    fmt = format_of(path)
    plan = plan_columns(
        header_columns(path, fmt), input_schema, source=str(path), model=model, chosen=columns
    )
    absent_if_null = set(plan.schemas) - plan.nullable
    rows: list[dict[str, Any]] = []
    errors: list[str | None] = []
    for batch in read_batches(path, fmt, plan, batch_rows):
        errors += batch.column(READ_ERROR).to_pylist()
        names = [n for n in batch.schema.names if n != READ_ERROR]
        for row in pa.Table.from_batches([batch.select(names)]).to_pylist():
            rows.append(
                {k: _plain(v) for k, v in row.items() if not (v is None and k in absent_if_null)}
            )
    return FeatureTable(rows, errors, plan)
