"""Input of a batch job: Parquet, CSV or JSON Lines files, read as a stream.

The input is split into *work units*: one per Parquet row group, one per CSV or JSON Lines
file. Units are numbered in a fixed order (files sorted by path, row groups in file order),
so every run of the same job produces the same parts in the same order. Files are read by
:mod:`servinglib.tabular` with the column types the model's ``input_schema`` declares (the
:class:`~servinglib.tabular.ColumnPlan`), the reader ``servinglib profile`` uses too.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from servinglib.errors import ConfigError
from servinglib.tabular import ColumnPlan, InputFileError, read_batches

__all__ = ["FORMATS", "InputSource", "WorkUnit", "open_input"]

FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".jsonl": "json",
    ".json": "json",
}


@dataclass(frozen=True)
class WorkUnit:
    """One slice of the input that becomes one output part."""

    index: int
    path: str
    row_group: int | None  # None: the whole file (CSV, JSON Lines)
    rows: int | None  # known up front for Parquet only


@dataclass(frozen=True)
class InputSource:
    """The input files of a job, their format, their work units and the columns read."""

    files: tuple[str, ...]
    format: str
    units: tuple[WorkUnit, ...]
    plan: ColumnPlan = field(default_factory=ColumnPlan)

    @property
    def total_rows(self) -> int | None:
        """Rows in the whole input when the format records it (Parquet), else None."""
        if any(unit.rows is None for unit in self.units):
            return None
        return sum(unit.rows or 0 for unit in self.units)

    def fingerprint(self) -> list[dict[str, object]]:
        """Path, size and modification time of every file: a resumed job must see the same."""
        return [
            {"path": f, "size": os.stat(f).st_size, "mtime_ns": os.stat(f).st_mtime_ns}
            for f in self.files
        ]

    def batches(self, unit: WorkUnit, batch_size: int) -> Iterator[pa.RecordBatch]:
        """Record batches of at most ``batch_size`` rows of one unit, in input order.

        Raises:
            InputFileError: the unit's file cannot be read, naming it.
        """
        for batch in read_batches(unit.path, self.format, self.plan, batch_size, unit.row_group):
            if batch.num_rows:
                yield batch


def _expand(spec: str) -> list[str]:
    path = Path(spec)
    if path.is_dir():
        return sorted(
            str(p)
            for p in path.rglob("*")
            if p.is_file() and p.suffix in FORMATS and not p.name.startswith(("_", "."))
        )
    if path.is_file():
        return [str(path)]
    return sorted(p for p in glob.glob(spec, recursive=True) if Path(p).is_file())


def open_input(spec: str, input_format: str | None = None) -> InputSource:
    """Find the files of ``spec`` (a file, a directory or a glob) and split them into units.

    Raises:
        ConfigError: nothing matches, the format is unknown or files of several formats mix.
        InputFileError: a Parquet file's footer cannot be read.
    """
    files = _expand(spec)
    if not files:
        raise ConfigError(
            f"no input files match {spec!r}; pass a file, a directory or a glob of "
            f"{', '.join(sorted(FORMATS))} files"
        )
    formats = {input_format} if input_format else {FORMATS.get(Path(f).suffix) for f in files}
    if None in formats or len(formats) != 1:
        raise ConfigError(
            f"cannot tell one input format from {spec!r} (suffixes "
            f"{sorted({Path(f).suffix for f in files})}); pass --input-format parquet|csv|json"
        )
    fmt = str(formats.pop())
    units: list[WorkUnit] = []
    for path in files:
        if fmt == "parquet":
            try:
                metadata = pq.read_metadata(path)
            except (pa.ArrowException, OSError) as e:
                raise InputFileError(
                    f"{path}: cannot read it as parquet ({e}); fix or remove the file"
                ) from e
            for group in range(metadata.num_row_groups):
                rows = metadata.row_group(group).num_rows
                units.append(WorkUnit(len(units), path, group, rows))
        else:
            units.append(WorkUnit(len(units), path, None, None))
    return InputSource(tuple(files), fmt, tuple(units))
