"""Rows to profile or report on: data files, and the prediction log (SQLite or PostgreSQL)."""

from __future__ import annotations

import csv
import json
import math
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

from servinglib.monitoring.drift.profile import ProfileError

__all__ = ["parse_since", "read_data_file", "read_prediction_log"]

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


def read_data_file(path: Path) -> list[dict[str, Any]]:
    """Feature rows of a ``.parquet``, ``.csv`` or ``.jsonl`` file (one object per line).

    Raises:
        ProfileError: unknown suffix, or a file that cannot be read.
    """
    suffix = path.suffix.lower()
    try:
        if suffix == ".jsonl":
            lines = path.read_text(encoding="utf-8").splitlines()
            return [json.loads(line) for line in lines if line.strip()]
        if suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as file:
                return [{k: _cell(v) for k, v in row.items()} for row in csv.DictReader(file)]
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
            return [{k: _plain(v) for k, v in row.items()} for row in rows]
    except ImportError as e:
        raise ProfileError(f"reading {path} needs pyarrow: pip install 'servinglib[drift]'") from e
    except (OSError, ValueError) as e:
        raise ProfileError(f"cannot read {path}: {e}") from e
    raise ProfileError(f"{path}: unknown data format {suffix!r}; use .parquet, .csv or .jsonl")


def _plain(value: Any) -> Any:
    """NaN becomes None (a missing value)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _cell(text: str | None) -> Any:
    """A CSV cell: empty is missing, numbers are numbers, the rest stays text."""
    if text is None or text == "":
        return None
    try:
        return _plain(float(text))
    except ValueError:
        return text


def read_prediction_log(
    url: str, model: str, version: str | None, since_s: float, now: float | None = None
) -> list[tuple[str, Any, Any]]:
    """``(version, features, output)`` of primary answers logged in the last ``since_s``.

    Raises:
        ProfileError: the log cannot be read.
    """
    start = (time.time() if now is None else now) - since_s
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
