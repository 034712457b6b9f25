"""Output of a batch job: one part per work unit, written atomically, and a manifest.

A part is written to a hidden temporary file, fsynced and renamed into place when complete,
then recorded in the manifest with its rows, size and SHA-256 (:mod:`._manifest`): a job
killed at any moment is resumed by scoring the units whose part is missing or does not
match its record, and never writes a row twice. The job's main process holds the
directory's lock (:mod:`._lock`) throughout and alone writes the manifest; worker processes
only write parts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from servinglib.batch._lock import OutputLock
from servinglib.batch._manifest import (
    LOCK,
    MANIFEST,
    PartStats,
    file_sha256,
    fsync_directory,
    is_own,
    own_names,
    read_manifest,
    write_manifest,
)
from servinglib.errors import ConfigError
from servinglib.wire.jsonbytes import dumps

__all__ = ["MANIFEST", "OutputDirectory", "PartStats"]

_EXTENSIONS = {"parquet": "parquet", "jsonl": "jsonl"}
_NAMED = 5  # foreign files a refusal names


def _error_count(table: pa.Table) -> int:
    # Arrow keeps each array's null count: no compute call, which would release the GIL and
    # then wait up to the switch interval to take it back from the scoring thread
    return len(table) - int(table.column("error").null_count)


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(sorted(names)[:_NAMED])
    return shown + (f" and {len(names) - _NAMED} more" if len(names) > _NAMED else "")


class OutputDirectory:
    """The output directory of one job: its lock, its manifest and its parts."""

    def __init__(self, path: str | os.PathLike[str], output_format: str) -> None:
        if output_format not in _EXTENSIONS:
            raise ConfigError(f"unknown output format {output_format!r}; use parquet or jsonl")
        self.path = Path(path)
        self.format = output_format
        self._lock: OutputLock | None = None
        self._created = False  # by lock(): removed again when the job is refused
        self._manifest: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        # worker processes write parts only: neither the lock nor the manifest travels
        return {**self.__dict__, "_lock": None, "_manifest": {}, "_created": False}

    def part_path(self, index: int) -> Path:
        """Where the part of work unit ``index`` lives."""
        return self.path / f"part-{index:05d}.{_EXTENSIONS[self.format]}"

    def lock(self) -> None:
        """Create the directory if need be and take its lock, before anything else.

        Raises:
            ConfigError: the path is not a directory, or another job holds the lock.
        """
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"--output {str(self.path)!r} exists and is not a directory")
        self._created = not self.path.exists()
        self._lock = OutputLock(self.path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock.acquire()
        except OSError as e:
            self._lock = None
            self.close()
            raise ConfigError(
                f"cannot use --output {str(self.path)!r}: {e}; choose a directory this user "
                "can create and write"
            ) from e
        except BaseException:
            self._lock = None
            self.close()
            raise

    def start(self, job: Mapping[str, Any], units: int, *, resume: bool, overwrite: bool) -> None:
        """Create the manifest, or check that ``--resume`` may go on (under :meth:`lock`).

        Args:
            job: what the job is (compared with the manifest on ``--resume``).
            units: work units, so parts, the job writes.
            resume: finish the job the manifest describes.
            overwrite: delete the files the manifest lists as its own, then start afresh.

        Raises:
            ConfigError: the directory holds files that are not a batch output's (nothing
                is deleted then), or a job that neither flag allows using.
        """
        assert self._lock is not None, "lock() the output directory first"
        self._start(dict(job), units, resume=resume, overwrite=overwrite)

    def _start(self, job: dict[str, Any], units: int, *, resume: bool, overwrite: bool) -> None:
        names = os.listdir(self.path)
        manifest = read_manifest(self.path) if MANIFEST in names else None
        own = own_names(manifest) if manifest is not None else {LOCK}
        # an own name that is a folder (or a device...) was not written by a job: foreign
        foreign = [name for name in names if not is_own(name, own) or not self._removable(name)]
        if foreign:
            what = (
                "files its manifest does not list as the job's own"
                if manifest is not None
                else f"files and no {MANIFEST}"
            )
            raise ConfigError(
                f"{self.path} holds {what} ({_listing(foreign)}); batch-predict deletes and "
                "writes only its own output: choose an empty or new output directory, or move "
                "those files away"
            )
        if manifest is not None and overwrite:
            for name in sorted(names, key=lambda n: n == MANIFEST):  # the manifest last
                if name != LOCK:
                    (self.path / name).unlink()
            fsync_directory(self.path)
            manifest = None
        parts = {self.part_path(index).name: None for index in range(units)}
        if manifest is None:
            self._manifest = {"job": job, "complete": False, "parts": parts}
            write_manifest(self.path, self._manifest)
            return
        if not resume:
            raise ConfigError(
                f"{self.path} already holds a batch output; pass --resume to finish it or "
                "--overwrite to replace it"
            )
        recorded = manifest["job"]
        changed = sorted(k for k in {*recorded, *job} if recorded.get(k) != job.get(k))
        if changed:
            raise ConfigError(
                f"cannot resume into {self.path}: the job changed in {_changes(recorded, job)} "
                "since it started; use the same input, model, version and options, or "
                "--overwrite"
            )
        for name in names:
            if name.startswith(".") and name.endswith(".tmp"):
                (self.path / name).unlink(missing_ok=True)  # a file a killed run was writing
        previous = manifest.get("parts")
        if isinstance(previous, Mapping):
            parts.update({k: v for k, v in previous.items() if k in parts})
        self._manifest = {"job": job, "complete": False, "parts": parts}
        write_manifest(self.path, self._manifest)

    def _removable(self, name: str) -> bool:
        mode = os.lstat(self.path / name).st_mode
        return stat.S_ISREG(mode) or stat.S_ISLNK(mode)

    def close(self) -> None:
        """Release the directory's lock; remove the directory if this job created it for nothing."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        if self._created and not self._manifest:  # refused before it wrote anything
            self._created = False
            (self.path / LOCK).unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # not empty: keep what is there
                self.path.rmdir()

    def finish(self, content: Mapping[str, Any], *, complete: bool) -> None:
        """Write the final manifest: ``complete`` only when the job succeeded."""
        self._manifest = {**self._manifest, **content, "complete": complete}
        write_manifest(self.path, self._manifest)

    def read_manifest(self) -> dict[str, Any]:
        """The manifest as written."""
        return read_manifest(self.path)

    def record(self, index: int, stats: PartStats) -> None:
        """Record the part of unit ``index`` as written (main process only)."""
        self._manifest["parts"][self.part_path(index).name] = stats.to_dict()
        write_manifest(self.path, self._manifest)

    def done(self, index: int) -> PartStats | None:
        """The record of unit ``index``'s part when the file on disk matches it, else None.

        A part missing from the manifest, or whose size or SHA-256 differ from its record
        (empty, truncated, replaced, a symlink), is not trusted: its unit is scored again.
        """
        path = self.part_path(index)
        raw = self._manifest.get("parts", {}).get(path.name)
        if not raw:
            return None
        try:
            stats = PartStats.from_dict(raw)
            info = os.lstat(path)
        except (OSError, KeyError, TypeError, ValueError):
            return None
        if not stat.S_ISREG(info.st_mode) or info.st_size != stats.bytes:
            return None
        return stats if file_sha256(path) == stats.sha256 else None

    def write_part(self, index: int, schema: pa.Schema, tables: Iterable[pa.Table]) -> PartStats:
        """Write the tables of unit ``index`` as its part, durably and atomically."""
        final = self.part_path(index)
        tmp = self.path / f".{final.name}.{os.getpid()}.tmp"
        rows = errors = 0
        try:
            if self.format == "parquet":
                with pq.ParquetWriter(tmp, schema) as writer:
                    for table in tables:
                        writer.write_table(table)
                        rows, errors = rows + len(table), errors + _error_count(table)
                with tmp.open("rb") as written:
                    digest = hashlib.file_digest(written, "sha256").hexdigest()
                    os.fsync(written.fileno())
            else:
                hasher = hashlib.sha256()
                with tmp.open("wb") as out:
                    for table in tables:
                        block = b"".join(dumps(row) + b"\n" for row in table.to_pylist())
                        out.write(block)
                        hasher.update(block)
                        rows, errors = rows + len(table), errors + _error_count(table)
                    out.flush()
                    os.fsync(out.fileno())
                digest = hasher.hexdigest()
            size = tmp.stat().st_size
            os.replace(tmp, final)
            fsync_directory(self.path)
        finally:
            tmp.unlink(missing_ok=True)
        return PartStats(rows, errors, size, digest)


def _changes(recorded: Mapping[str, Any], job: Mapping[str, Any]) -> str:
    """What differs between the recorded job and this one, input files by name."""
    keys = sorted(k for k in {*recorded, *job} if recorded.get(k) != job.get(k))
    if "input" not in keys:
        return str(keys)
    before = {f.get("path"): f for f in recorded.get("input") or [] if isinstance(f, Mapping)}
    after = {f.get("path"): f for f in job.get("input") or [] if isinstance(f, Mapping)}
    files = sorted(str(p) for p in {*before, *after} if before.get(p) != after.get(p))
    named = [k for k in keys if k != "input"]
    shown = ", ".join(files[:_NAMED]) + (" ..." if len(files) > _NAMED else "")
    return f"its input files ({shown}: added, removed or their content changed)" + (
        f" and {named}" if named else ""
    )
