"""Rows to report on from the prediction log (SQLite, PostgreSQL or the Parquet lake of a
parquet sink); data files are read by :mod:`servinglib.tabular`, the reader ``batch-predict``
uses."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from typing import Any

from servinglib.monitoring.drift.profile import ProfileError
from servinglib.monitoring.lake_features import FEATURE_PREFIX, features_of

__all__ = ["parse_since", "read_prediction_log"]

_SINCE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> float:
    """Seconds in a duration such as ``30m``, ``24h`` or ``7d``.

    Raises:
        ProfileError: for anything else.
    """
    match = _SINCE.match(text.strip())
    if match is None:
        raise ProfileError(f"--since {text!r} is not a duration; use e.g. 30m, 24h or 7d")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def read_prediction_log(
    url: str, model: str, version: str | None, since_s: float, now: float | None = None
) -> list[tuple[str, Any, Any]]:
    """``(version, features, output)`` of primary answers logged in the last ``since_s``.

    Raises:
        ProfileError: the log cannot be read.
    """
    start = (time.time() if now is None else now) - since_s
    if not url.startswith(("sqlite:///", "postgres")):
        return read_lake(url, model, version, start)
    sql = (
        "SELECT version, features, output FROM predictions "
        "WHERE model = {p} AND logged_at >= {p} AND shadow_of IS NULL"
    )
    params: list[Any] = [model, start]
    if version is not None:
        sql += " AND version = {p}"
        params.append(version)
    sql += " ORDER BY logged_at"
    try:
        if url.startswith("sqlite:///"):
            with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
                rows = connection.execute(sql.format(p="?"), params).fetchall()
        else:
            import psycopg

            with psycopg.connect(url) as connection:
                rows = connection.execute(sql.format(p="%s"), params).fetchall()
    except Exception as e:
        raise ProfileError(f"cannot read the prediction log {url}: {e}") from e
    return [(str(v), json.loads(f), json.loads(o)) for v, f, o in rows]


def read_lake(
    url: str, model: str, version: str | None, start: float
) -> list[tuple[str, Any, Any]]:
    """``(version, features, output)`` of primary answers in the Parquet lake at ``url``
    logged since ``start``, in logging order (only the model's partitions are read).

    Files are read one by one: each has the feature columns of its own records.

    Raises:
        ProfileError: the lake cannot be read.
    """
    rows: list[tuple[float, str, Any, Any]] = []
    try:
        import fsspec
        import pyarrow.dataset as ds

        fs, root = fsspec.core.url_to_fs(url)
        where = f"{str(root).rstrip('/')}/model={model}"
        if version is not None:
            where += f"/version={version}"
        if not fs.exists(where):
            return []
        dataset = ds.dataset(where, format="parquet", filesystem=fs, partitioning=None)
        wanted = (ds.field("logged_at") >= start) & ds.field("shadow_of").is_null()
        for fragment in dataset.get_fragments():
            names = fragment.physical_schema.names
            flat = [n for n in names if n.startswith(FEATURE_PREFIX)]
            table = fragment.to_table(
                columns=["version", "inputs", "outputs", "logged_at", *flat], filter=wanted
            )
            columns = {name: table.column(name).to_pylist() for name in table.column_names}
            for i, logged_at in enumerate(columns["logged_at"]):
                inputs = columns["inputs"][i]
                features = features_of(
                    None if inputs is None else json.loads(inputs),
                    {name: columns[name][i] for name in flat},
                )
                output = json.loads(columns["outputs"][i])
                rows.append((logged_at, str(columns["version"][i]), features, output))
    except Exception as e:
        raise ProfileError(f"cannot read the prediction lake {url}: {e}") from e
    rows.sort(key=lambda row: row[0])
    return [(v, f, o) for _, v, f, o in rows]
