"""Error text for people: the first line of an error, temporary paths cut to file names.

The optimizer works in temporary directories and stages outputs in hidden directories next
to them; their paths mean nothing to the user and change every run, so messages name the
file only.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import PurePosixPath

__all__ = ["first_line", "without_temporary_paths"]

_PATH = re.compile(r"/[^\s'\"]+")
# mkdtemp names: servinglib-optimize-XXXXXXXX, or .model.onnx.XXXXXXXX staging directories
_TEMPORARY = re.compile(r"^(servinglib-[a-z-]+|\..+)[_a-z0-9]{8}$")


def _short(match: re.Match[str]) -> str:
    path = PurePosixPath(match.group(0))
    inside_tmp = str(path).startswith(tempfile.gettempdir().rstrip("/") + "/")
    if inside_tmp or any(_TEMPORARY.match(part) for part in path.parts[:-1]):
        return path.name
    return match.group(0)


def without_temporary_paths(text: str) -> str:
    """``text`` with paths inside temporary or staging directories cut to their file names."""
    return _PATH.sub(_short, text)


def first_line(error: Exception) -> str:
    """The gist of an error: its first line, temporary paths cut to their file names."""
    text = str(error).strip()
    return without_temporary_paths(text.splitlines()[0]) if text else type(error).__name__
