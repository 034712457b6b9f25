"""Tabular input read with the types a model's ``input_schema`` declares.

``servinglib batch-predict`` and ``servinglib profile`` read Parquet, CSV and JSON Lines
files through this one reader, so both see the same values: a CSV cell ``1`` under a
``number`` feature is the number 1, ``true`` under a ``boolean`` feature is True, and a cell
that cannot be read as its declared type fails only its own row, with the message
``/infer`` gives for the same value::

    plan = plan_columns(header_columns(path, "csv"), input_schema, source=str(path))
    for batch in read_batches(path, "csv", plan, batch_rows=8192):
        ...  # typed feature columns, plus READ_ERROR: one message (or null) per row

Errors: :class:`InputFileError` (a :class:`~servinglib.errors.ConfigError`) names a file
that cannot be read at all (truncated Parquet, a CSV line with too many cells ...).
"""

from __future__ import annotations

from servinglib.tabular.plan import ColumnPlan, plan_columns
from servinglib.tabular.reader import (
    READ_ERROR,
    InputFileError,
    header_columns,
    read_batches,
)
from servinglib.tabular.rows import FeatureTable, format_of, read_feature_rows

__all__ = [
    "READ_ERROR",
    "ColumnPlan",
    "FeatureTable",
    "InputFileError",
    "format_of",
    "header_columns",
    "plan_columns",
    "read_batches",
    "read_feature_rows",
]
