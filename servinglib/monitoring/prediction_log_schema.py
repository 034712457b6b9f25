"""The ``predictions`` table of the SQL prediction log: its columns, creation and migrations.

The schema is versioned: SQLite keeps the version in ``PRAGMA user_version``, PostgreSQL in
the one-row table ``servinglib_schema``. A table an older release created (version 1, or no
version recorded) is migrated in place when a worker first connects, under a lock, so
workers starting together apply each migration once. Version 2 adds ``trace_id``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COLUMNS", "SCHEMA_VERSION", "insert_sql", "prepare_postgres", "prepare_sqlite"]

COLUMNS = (
    "request_id",
    "logged_at",
    "model",
    "version",
    "shadow_of",
    "features",
    "output",
    "latency_ms",
    "trace_id",
)

_CREATE = """
CREATE TABLE IF NOT EXISTS predictions (
    id {id_type},
    request_id TEXT NOT NULL,
    logged_at DOUBLE PRECISION NOT NULL,
    model TEXT NOT NULL,
    version TEXT NOT NULL,
    shadow_of TEXT,
    features TEXT NOT NULL,
    output TEXT NOT NULL,
    latency_ms DOUBLE PRECISION NOT NULL,
    trace_id TEXT
)
"""
# From version N to N + 1, in order; a new column is nullable, so old rows stay valid.
_MIGRATIONS = ("ALTER TABLE predictions ADD COLUMN trace_id TEXT",)
SCHEMA_VERSION = len(_MIGRATIONS) + 1
_CREATE_LOCK = 0x5E4F1A6  # the advisory-lock key of the schema change ("servinglib")


def insert_sql(placeholder: str) -> str:
    """The INSERT of one row of :data:`COLUMNS` with ``placeholder`` for each value."""
    # Column names are constants of this module; values always go through placeholders.
    values = ", ".join([placeholder] * len(COLUMNS))
    return f"INSERT INTO predictions ({', '.join(COLUMNS)}) VALUES ({values})"  # noqa: S608


def _migrations_from(existed: bool, recorded: int | None) -> tuple[str, ...]:
    """The migrations a table needs: none when just created; an unversioned one is 1."""
    if not existed:
        return ()
    return _MIGRATIONS[(recorded or 1) - 1 :]


def prepare_sqlite(connection: Any) -> None:
    """Create or migrate the table in one ``BEGIN IMMEDIATE`` transaction (the write lock
    serialises workers); ``connection`` is in autocommit mode."""
    (recorded,) = connection.execute("PRAGMA user_version").fetchone()
    if recorded >= SCHEMA_VERSION:
        return
    connection.execute("BEGIN IMMEDIATE")
    try:
        (recorded,) = connection.execute("PRAGMA user_version").fetchone()
        existed = connection.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'predictions'"
        ).fetchone()
        connection.execute(_CREATE.format(id_type="INTEGER PRIMARY KEY AUTOINCREMENT"))
        for sql in _migrations_from(existed is not None, recorded):
            connection.execute(sql)
        connection.execute(f"PRAGMA user_version = {max(recorded, SCHEMA_VERSION)}")
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


def prepare_postgres(connection: Any) -> None:
    """Create or migrate the table in one transaction under an advisory lock (workers start
    together: the others wait instead of racing into DuplicateTable or DuplicateColumn)."""
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (_CREATE_LOCK,))
        existed = connection.execute("SELECT to_regclass('predictions') IS NOT NULL").fetchone()
        connection.execute(_CREATE.format(id_type="BIGSERIAL PRIMARY KEY"))
        connection.execute("CREATE TABLE IF NOT EXISTS servinglib_schema (version INTEGER)")
        (recorded,) = connection.execute("SELECT max(version) FROM servinglib_schema").fetchone()
        if recorded is not None and recorded >= SCHEMA_VERSION:
            return
        for sql in _migrations_from(bool(existed[0]), recorded):
            connection.execute(sql)
        connection.execute("DELETE FROM servinglib_schema")
        connection.execute("INSERT INTO servinglib_schema VALUES (%s)", (SCHEMA_VERSION,))
