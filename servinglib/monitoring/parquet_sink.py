"""The Parquet sink: the prediction log as a lake on any fsspec URL
(``pip install 'servinglib[parquet]'``; ``s3fs`` or ``gcsfs`` for object stores).

Each batch becomes one file per partition,
``model=M/version=V/date=YYYY-MM-DD/hour=HH/part-<time_ns>-<pid>-<n>.parquet``, so files
roll with the sink's ``flush_interval_ms`` (time) and ``batch_size`` (records). A file is
written under a hidden temporary name (``.part-….parquet.tmp``) and renamed: readers (which
skip hidden files and read ``*.parquet``) never see a half-written one. On object stores
the upload itself is atomic, so the file is written under its final name.

A file's features are typed ``feature_<name>`` columns where they flatten (the model's
``input_schema``, else the file's values, say which type:
:mod:`~servinglib.monitoring.lake_features`), JSON text in ``inputs`` otherwise.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from servinglib.errors import ConfigError
from servinglib.monitoring.lake_features import flatten
from servinglib.monitoring.prediction_events import event_of, json_text, lake_row

if TYPE_CHECKING:
    from servinglib.serving.recording import AnsweredPrediction

__all__ = ["LAKE_COLUMNS", "ParquetSink", "lake_schema"]

LAKE_COLUMNS = (
    ("id", "string"),
    ("type", "string"),
    ("source", "string"),
    ("time", "timestamp[us, tz=UTC]"),
    ("request_id", "string"),
    ("trace_id", "string"),
    ("model", "string"),
    ("version", "string"),
    ("shadow_of", "string"),
    ("inputs", "string"),
    ("outputs", "string"),
    ("latency_ms", "double"),
    ("logged_at", "double"),
    ("schema_version", "int32"),
)


def lake_schema() -> Any:
    """The pyarrow schema of a lake file."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "double": pa.float64(),
        "int32": pa.int32(),
        "timestamp[us, tz=UTC]": pa.timestamp("us", tz="UTC"),
    }
    return pa.schema([(name, types[kind]) for name, kind in LAKE_COLUMNS])


def _fs(url: str, storage_options: Mapping[str, Any]) -> tuple[Any, str]:
    try:
        import fsspec
        import pyarrow.parquet  # noqa: F401  (fail, and pay the import, at start: not at
        # the first write, where a worker would hold its first records for the import)
    except ImportError as e:
        raise ConfigError(
            "a parquet prediction sink needs pyarrow and fsspec: pip install 'servinglib[parquet]'"
        ) from e
    fs, root = fsspec.core.url_to_fs(url, **storage_options)
    return fs, str(root).rstrip("/")


class ParquetSink:
    """Writes batches of events as Parquet files under ``url``."""

    def __init__(
        self,
        url: str,
        options: Mapping[str, Any],
        input_schemas: Mapping[str, Mapping[str, Any] | None] | None = None,
    ) -> None:
        self._input_schemas = input_schemas or {}
        self._fs, self._root = _fs(url, options.get("storage_options", {}))
        self._local = "file" in self._fs.protocol
        self._schema = lake_schema()
        self._count = itertools.count()

    def write_answers(self, answers: Sequence[AnsweredPrediction], source: str) -> None:
        """Add the events of ``answers`` (see :meth:`write`)."""
        self.write([event_of(answer, source) for answer in answers])

    def write(self, events: Sequence[dict[str, Any]]) -> None:
        """Write one file per partition of ``events``."""
        import pyarrow.parquet as pq

        partitions: dict[str, list[dict[str, Any]]] = {}
        for event in events:
            row = lake_row(event)
            key = (
                f"model={row['model']}/version={row['version']}/"
                f"date={row['time']:%Y-%m-%d}/hour={row['time']:%H}"
            )
            partitions.setdefault(key, []).append(row)
        for key, rows in partitions.items():
            directory = f"{self._root}/{key}"
            name = f"part-{time.time_ns()}-{os.getpid()}-{next(self._count)}.parquet"
            table = self._table(rows)
            if not self._local:
                pq.write_table(table, f"{directory}/{name}", filesystem=self._fs)
                continue
            self._fs.makedirs(directory, exist_ok=True)
            temporary = f"{directory}/.{name}.tmp"
            pq.write_table(table, temporary, filesystem=self._fs)
            self._fs.mv(temporary, f"{directory}/{name}")

    def _table(self, rows: list[dict[str, Any]]) -> Any:
        """The rows of one partition (one model version): base columns, then features."""
        import pyarrow as pa

        flat = flatten([row["inputs"] for row in rows], self._input_schemas.get(rows[0]["model"]))
        for row, rest in zip(rows, flat.rest, strict=True):
            row["inputs"] = None if rest is None else json_text(rest)
        table = pa.Table.from_pylist(rows, schema=self._schema)
        for name, (kind, values) in flat.columns.items():
            table = table.append_column(name, pa.array(values, type=pa.type_for_alias(kind)))
        return table

    def close(self) -> None:
        """Nothing is held between batches."""
