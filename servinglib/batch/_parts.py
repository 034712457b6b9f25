"""Output of a batch job: one part per work unit, written atomically, and a manifest.

A part is written to a hidden temporary file and renamed into place when complete, so a
part file exists exactly when all its rows were written: a job killed at any moment is
resumed by scoring the units that have no part yet, and never writes a row twice.

``_manifest.json`` records what the job is (model, version, input files with their sizes
and modification times, options, output columns); ``--resume`` refuses to continue a job
whose manifest describes different work.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from servinglib.errors import ConfigError
from servinglib.wire.jsonbytes import dumps

__all__ = ["MANIFEST", "OutputDirectory", "PartStats"]

MANIFEST = "_manifest.json"
_EXTENSIONS = {"parquet": "parquet", "jsonl": "jsonl"}


@dataclass(frozen=True)
class PartStats:
    """Rows and error rows of one written part."""

    rows: int
    errors: int


def _error_count(table: pa.Table) -> int:
    # Arrow keeps each array's null count: no compute call, which would release the GIL and
    # then wait up to the switch interval to take it back from the scoring thread
    return len(table) - int(table.column("error").null_count)


class OutputDirectory:
    """The output directory of one job: its manifest and its parts."""

    def __init__(self, path: str | os.PathLike[str], output_format: str) -> None:
        if output_format not in _EXTENSIONS:
            raise ConfigError(f"unknown output format {output_format!r}; use parquet or jsonl")
        self.path = Path(path)
        self.format = output_format

    def part_path(self, index: int) -> Path:
        """Where the part of work unit ``index`` lives."""
        return self.path / f"part-{index:05d}.{_EXTENSIONS[self.format]}"

    def start(self, job: Mapping[str, Any], *, resume: bool, overwrite: bool) -> None:
        """Create the directory and manifest, or check that ``--resume`` continues this job.

        Raises:
            ConfigError: the directory holds other work and neither flag allows using it.
        """
        manifest = self.path / MANIFEST
        if overwrite and self.path.is_dir():
            for child in self.path.iterdir():
                if child.name == MANIFEST or child.name.startswith(("part-", ".part-")):
                    child.unlink()
        if manifest.is_file():
            if not resume:
                raise ConfigError(
                    f"{self.path} already holds a batch output; pass --resume to finish it or "
                    "--overwrite to replace it"
                )
            recorded = json.loads(manifest.read_text(encoding="utf-8"))["job"]
            changed = sorted(k for k in {*recorded, *job} if recorded.get(k) != job.get(k))
            if changed:
                raise ConfigError(
                    f"cannot resume into {self.path}: the job changed in {changed} since it "
                    "started; use the same input, model, version and options, or --overwrite"
                )
            for stale in self.path.glob(".part-*"):
                stale.unlink(missing_ok=True)  # a part a killed run was writing
            return
        if self.path.is_dir() and any(self.path.iterdir()):
            raise ConfigError(
                f"{self.path} is not empty and holds no {MANIFEST}; choose an empty or new "
                "output directory"
            )
        self.path.mkdir(parents=True, exist_ok=True)
        self.write_manifest({"job": dict(job), "complete": False})

    def write_manifest(self, content: Mapping[str, Any]) -> None:
        """Replace the manifest atomically."""
        tmp = self.path / f".{MANIFEST}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, self.path / MANIFEST)

    def read_manifest(self) -> dict[str, Any]:
        """The manifest as written."""
        content: dict[str, Any] = json.loads((self.path / MANIFEST).read_text(encoding="utf-8"))
        return content

    def done(self, index: int) -> PartStats | None:
        """Stats of the part of unit ``index``, or None when it was not written yet."""
        path = self.part_path(index)
        if not path.is_file():
            return None
        if self.format == "parquet":
            return PartStats(
                pq.read_metadata(path).num_rows,
                _error_count(pq.read_table(path, columns=["error"])),
            )
        rows = errors = 0
        with path.open("rb") as lines:
            for line in lines:
                rows += 1
                errors += json.loads(line).get("error") is not None
        return PartStats(rows, errors)

    def write_part(self, index: int, schema: pa.Schema, tables: Iterable[pa.Table]) -> PartStats:
        """Write the tables of unit ``index`` as its part, atomically; returns its stats."""
        final = self.part_path(index)
        tmp = self.path / f".{final.name}.{os.getpid()}.tmp"
        rows = errors = 0
        try:
            if self.format == "parquet":
                with pq.ParquetWriter(tmp, schema) as writer:
                    for table in tables:
                        writer.write_table(table)
                        rows, errors = rows + len(table), errors + _error_count(table)
            else:
                with tmp.open("wb") as out:
                    for table in tables:
                        for row in table.to_pylist():
                            out.write(dumps(row) + b"\n")
                        rows, errors = rows + len(table), errors + _error_count(table)
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        return PartStats(rows, errors)
