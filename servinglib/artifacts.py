"""Artifact hygiene: contained version directories, sha256 pins, no unannounced pickle."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping
from pathlib import Path

from servinglib.config import ModelConfig
from servinglib.errors import ModelLoadError, VersionNotFoundError

log = logging.getLogger("servinglib.registry")

__all__ = [
    "NAME_PATTERN",
    "PICKLE_SUFFIXES",
    "discover_versions",
    "find_pickles",
    "verify_sha256",
    "version_directory",
    "version_sort_key",
]

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")

# Formats that execute code when loaded (pickle and its wrappers).
PICKLE_SUFFIXES = frozenset({".pkl", ".pickle", ".joblib", ".pth", ".ckpt", ".sav", ".dill"})
_PICKLE_MAGIC = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


def version_directory(repository: Path, model: str, version: str) -> Path:
    """The directory of ``version``, refusing names and links that leave ``repository``.

    Raises:
        VersionNotFoundError: the name is not a valid version name or escapes the repository.
    """
    if not NAME_PATTERN.match(version):
        raise VersionNotFoundError(model, version, [])
    root = repository.resolve()
    candidate = (root / version).resolve()
    if candidate.parent != root:
        raise VersionNotFoundError(model, version, [])
    return candidate


def find_pickles(directory: Path) -> list[Path]:
    """Files under ``directory`` that are pickles (by suffix or by their first bytes)."""
    found = []
    for path in sorted(directory.rglob("*")):
        if not path.is_file():
            continue
        if path.suffix.lower() in PICKLE_SUFFIXES:
            found.append(path)
            continue
        with path.open("rb") as handle:
            if handle.read(2) in _PICKLE_MAGIC:
                found.append(path)
    return found


def verify_sha256(directory: Path, pins: Mapping[str, str]) -> None:
    """Check each pinned file (relative to ``directory``) against its sha256.

    Raises:
        ModelLoadError: a pinned file is missing, outside the directory, or differs.
    """
    root = directory.resolve()
    for relative, expected in pins.items():
        path = (root / relative).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            raise ModelLoadError(f"pinned artifact {relative!r} not found in {directory}")
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        if digest.hexdigest() != expected.lower():
            raise ModelLoadError(
                f"artifact {relative!r} has sha256 {digest.hexdigest()}, but servinglib.yaml pins "
                f"{expected}; restore the right file or update the pin"
            )


def version_sort_key(version: str) -> tuple[int, int | str]:
    """Numeric versions first, in numeric order, then the others by name."""
    return (0, int(version)) if version.isdigit() else (1, version)


def discover_versions(model: ModelConfig) -> list[str]:
    """Version directories of a model's repository (or its explicit ``versions`` list)."""
    if model.versions is not None:
        return sorted(model.versions, key=version_sort_key)
    found = []
    root = model.repository.resolve()
    for child in model.repository.iterdir():
        if not child.is_dir() or child.name.startswith(("_", ".")):
            continue
        if child.resolve().parent != root:
            log.warning("ignoring %s: it links outside the model repository %s", child, root)
            continue
        if NAME_PATTERN.match(child.name):
            found.append(child.name)
        else:
            log.warning(
                "ignoring directory %s: not a valid version name (%s)", child, NAME_PATTERN.pattern
            )
    return sorted(found, key=version_sort_key)
