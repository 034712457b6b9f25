"""Artifact hygiene: contained version directories, sha256 pins, no unannounced pickle."""

from __future__ import annotations

import bz2
import hashlib
import io
import logging
import lzma
import pickletools
import re
import zipfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

import numpy as np

from servinglib.config.spec import ModelConfig
from servinglib.errors import ModelLoadError, VersionNotFoundError
from servinglib.lifecycle.load_timeout import LoadFailedError

log = logging.getLogger("servinglib.lifecycle.registry")

__all__ = [
    "NAME_PATTERN",
    "PICKLE_SUFFIXES",
    "check_artifacts",
    "discover_versions",
    "find_pickles",
    "holds_pickle",
    "verify_sha256",
    "version_directory",
    "version_sort_key",
]

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")

# Formats that execute code when loaded (pickle and its wrappers).
PICKLE_SUFFIXES = frozenset({".pkl", ".pickle", ".joblib", ".pth", ".ckpt", ".sav", ".dill"})
# How much of a file (or of its decompressed stream) is read to recognise a pickle.
SCAN_BYTES = 1 << 20
# Opcodes that import or call: a stream that reaches one of them is a pickle, whole or not.
_CODE_OPCODES = frozenset(
    {"GLOBAL", "STACK_GLOBAL", "REDUCE", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "BUILD"}
)
# PROTO opcode of protocols 2-5: joblib writes array bytes inside such a stream, so it
# does not parse to STOP; the header says enough.
_PICKLE_MAGIC = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"


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
    """Files under ``directory`` that hold pickle data, by suffix or by content.

    Content, whatever the name: pickle streams of every protocol (0 and 1 have no magic
    bytes: their opcodes are parsed, never executed), the same compressed with gzip, bz2,
    xz/lzma or zlib (joblib's compressed dumps), object-dtype ``.npy`` arrays (loading them
    needs ``allow_pickle=True``) and zip archives (``.npz``, torch's ``.pt``) holding either.
    """
    found = []
    for path in sorted(directory.rglob("*")):
        if not path.is_file():
            continue
        if path.suffix.lower() in PICKLE_SUFFIXES:
            found.append(path)
            continue
        with path.open("rb") as handle:
            if holds_pickle(handle):
                found.append(path)
    return found


def holds_pickle(handle: IO[bytes]) -> bool:
    """Whether the stream (a file opened for reading in binary) holds pickle data."""
    head = handle.read(SCAN_BYTES)
    if head.startswith(_ZIP_MAGIC):
        handle.seek(0)
        return _zip_holds_pickle(handle)
    return _bytes_hold_pickle(head, depth=0)


def _bytes_hold_pickle(head: bytes, depth: int) -> bool:
    if head.startswith(_NPY_MAGIC):
        return _npy_holds_objects(head)
    decompressed = _decompress(head) if depth < 2 else None
    if decompressed is not None:
        return _bytes_hold_pickle(decompressed, depth + 1)
    return _is_pickle_stream(head)


# Magic bytes of the compressed formats joblib and pickle users write.
_DECOMPRESSORS: tuple[tuple[tuple[bytes, ...], Callable[[], object]], ...] = (
    ((b"\x1f\x8b",), lambda: zlib.decompressobj(16 + zlib.MAX_WBITS)),  # gzip
    ((b"BZh",), bz2.BZ2Decompressor),
    ((b"\xfd7zXZ\x00", b"\x5d\x00\x00"), lzma.LZMADecompressor),  # xz, lzma-alone
    ((b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda"), zlib.decompressobj),  # zlib
)


def _decompress(head: bytes) -> bytes | None:
    """Up to :data:`SCAN_BYTES` of the decompressed stream; None when ``head`` is not
    compressed (or not decompressible)."""
    for magics, make in _DECOMPRESSORS:
        if head.startswith(magics):
            decompressor = make()
            try:
                return bytes(decompressor.decompress(head, SCAN_BYTES))  # type: ignore[attr-defined]
            except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError):
                return None
    return None


def _is_pickle_stream(head: bytes) -> bool:
    """Parse opcodes (never run them): a pickle program reaches STOP with one value built.

    Only a whole, consistent program counts (text such as "0.5" parses as POP, STOP but
    pops an empty stack); a stream cut at :data:`SCAN_BYTES` counts when its opcodes parse
    to the cut and it has imported or called something on the way.
    """
    if head.startswith(_PICKLE_MAGIC):
        return True
    if not head:
        return False
    try:
        pickletools.dis(head, out=_DISCARD)  # checks the stack effect of every opcode
    except Exception:  # dis raises several types on bytes that are not pickle
        return len(head) >= SCAN_BYTES and _parses_to_the_cut(head)
    return True


def _parses_to_the_cut(head: bytes) -> bool:
    calls, reached = False, 0
    try:
        for opcode, _, position in pickletools.genops(io.BytesIO(head)):
            reached = position or 0
            calls = calls or opcode.name in _CODE_OPCODES
    except Exception:  # as above
        return calls and reached >= len(head) - 1024
    return calls


class _Discard(io.StringIO):
    """A text stream that keeps nothing (pickletools.dis writes its listing to one)."""

    def write(self, text: str) -> int:
        return len(text)


_DISCARD = _Discard()


def _npy_holds_objects(head: bytes) -> bool:
    stream = io.BytesIO(head)
    try:
        major, _ = np.lib.format.read_magic(stream)
        if major == 1:
            _, _, dtype = np.lib.format.read_array_header_1_0(stream)
        else:
            _, _, dtype = np.lib.format.read_array_header_2_0(stream)
    except (ValueError, OSError):
        return True  # a header numpy cannot read: do not guess it is safe
    return bool(dtype.hasobject)


def _zip_holds_pickle(handle: IO[bytes]) -> bool:
    try:
        with zipfile.ZipFile(handle) as archive:
            for member in archive.infolist():
                if member.filename.lower().endswith(tuple(PICKLE_SUFFIXES)):
                    return True
                with archive.open(member) as inner:
                    if _bytes_hold_pickle(inner.read(SCAN_BYTES), depth=0):
                        return True
    # zipfile raises NotImplementedError for a compression method it cannot read: such a
    # member cannot be a NumPy or joblib archive we would load either.
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError):
        return False
    return False


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


def check_artifacts(model: ModelConfig, version: str, path: Path) -> None:
    """sha256 pins first, then refuse pickles unless the model allows them."""
    prefix = f"{version}/"
    pins = {k.removeprefix(prefix): v for k, v in model.sha256.items() if k.startswith(prefix)}
    verify_sha256(path, pins)
    pickles = find_pickles(path)
    if pickles and not model.allow_pickle:
        names = ", ".join(str(p.relative_to(path)) for p in pickles)
        raise LoadFailedError(
            f"{names} is pickle data, which runs code when loaded; convert it to a safe "
            "format (ONNX, safetensors, .npz of numeric arrays, JSON) or set "
            "allow_pickle: true for this model"
        )
    if pickles:
        log.warning(
            "model %r version %r loads pickle files (allow_pickle: true): trust them fully",
            model.name,
            version,
        )
