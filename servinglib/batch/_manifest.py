"""``_manifest.json``: what a batch job is, which files of its output directory are its own.

The manifest records the job (model, version, each input file's size and SHA-256, options,
output columns), the name of every part the job writes (listed before the first is written)
and, once a part is in place, its rows, error rows, size and SHA-256. ``--overwrite``
deletes only the files it lists, ``--resume`` trusts only the parts whose bytes match their
record, and ``complete`` turns true only when the whole job succeeded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servinglib.errors import ConfigError

__all__ = [
    "LOCK",
    "MANIFEST",
    "PartStats",
    "file_sha256",
    "fsync_directory",
    "input_identity",
    "is_own",
    "own_names",
    "read_manifest",
    "write_manifest",
]

MANIFEST = "_manifest.json"
LOCK = "_lock"
_PART = re.compile(r"^part-\d{5,}\.(?:parquet|jsonl)$")
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.\d+\.tmp$")  # .part-00003.parquet.1234.tmp


@dataclass(frozen=True)
class PartStats:
    """Rows, error rows, size and SHA-256 of one written part."""

    rows: int
    errors: int
    bytes: int = 0
    sha256: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The part's record in the manifest."""
        return {
            "rows": self.rows,
            "errors": self.errors,
            "bytes": self.bytes,
            "sha256": self.sha256,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> PartStats:
        """Inverse of :meth:`to_dict`."""
        return cls(int(raw["rows"]), int(raw["errors"]), int(raw["bytes"]), str(raw["sha256"]))


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes, in hex (read in 1 MiB blocks)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def input_identity(files: Iterable[str]) -> list[dict[str, Any]]:
    """Path, size and SHA-256 of every input file: a resumed job must read the same bytes.

    The content hash, not the modification time, tells a file fixed in place and re-stamped
    (``cp -p``, ``rsync -t``, ``os.utime``) from the file the job started on.
    """
    return [
        {"path": name, "size": os.stat(name).st_size, "sha256": file_sha256(name)} for name in files
    ]


def fsync_directory(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable (a no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename itself still holds
    finally:
        os.close(fd)


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of ``folder``.

    Raises:
        ConfigError: it is not valid JSON of a batch manifest.
    """
    path = folder / MANIFEST
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(
            f"{path} cannot be read as a batch manifest ({e}); it was not written by "
            "batch-predict or was damaged: choose another output directory"
        ) from e
    if not isinstance(content, dict) or not isinstance(content.get("job"), dict):
        raise ConfigError(
            f"{path} is not a batch manifest (no 'job' object); choose another output directory"
        )
    return content


def write_manifest(folder: Path, content: Mapping[str, Any]) -> None:
    """Replace the manifest atomically and durably (fsync, rename, fsync the directory)."""
    tmp = folder / f".{MANIFEST}.{os.getpid()}.tmp"
    data = (json.dumps(content, indent=2, sort_keys=True) + "\n").encode()
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / MANIFEST)
    fsync_directory(folder)


def own_names(manifest: Mapping[str, Any]) -> set[str]:
    """The names of the files a job with ``manifest`` wrote or may have been writing."""
    names = {MANIFEST, LOCK}
    parts = manifest.get("parts")
    if isinstance(parts, Mapping):
        names.update(str(name) for name in parts)
    files = manifest.get("files")  # manifests of complete jobs list their parts here too
    if isinstance(files, list):
        names.update(str(name) for name in files)
    # a hand-edited manifest cannot make --overwrite delete anything but parts
    return {name for name in names if name in (MANIFEST, LOCK) or _PART.match(name)}


def is_own(name: str, own: set[str]) -> bool:
    """Whether ``name`` is in ``own`` or is the temporary file of one of them."""
    if name in own:
        return True
    temporary = _TEMPORARY.match(name)
    return temporary is not None and temporary.group("name") in own
