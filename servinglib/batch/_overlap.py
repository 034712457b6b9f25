"""Refuse an output directory that overlaps the input: a job must never write over its data.

Paths are compared both as written (made absolute) and with symlinks resolved, so an output
reached through a link to the input directory, or an input file reached through a link into
the output, overlaps as surely as the same path spelled twice.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

from servinglib.errors import ConfigError

__all__ = ["check_no_overlap"]


def _forms(path: str | os.PathLike[str]) -> set[Path]:
    """``path`` made absolute, as written and with every symlink resolved."""
    return {Path(os.path.abspath(path)), Path(os.path.realpath(path))}


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _glob_pattern(spec: str) -> re.Pattern[str]:
    """A regular expression matching what ``glob.glob(spec, recursive=True)`` may match."""
    parts: list[str] = []
    i = 0
    while i < len(spec):
        if spec.startswith("**/", i):
            parts.append("(?:.*/)?")
            i += 3
        elif spec.startswith("**", i):
            parts.append(".*")
            i += 2
        elif spec[i] == "*":
            parts.append("[^/]*")
            i += 1
        elif spec[i] == "?":
            parts.append("[^/]")
            i += 1
        elif spec[i] == "[" and "]" in spec[i + 2 :]:
            end = spec.index("]", i + 2)
            body = spec[i + 1 : end]
            parts.append("[^" + re.escape(body[1:]) + "]" if body[:1] == "!" else f"[{body}]")
            i = end + 1
        else:
            parts.append(re.escape(spec[i]))
            i += 1
    return re.compile("".join(parts) + r"\Z")


def check_no_overlap(spec: str, output: str | os.PathLike[str]) -> None:
    """Refuse ``output`` when it holds the input, lies in it, or the input glob reaches it.

    Checked before the input is read, so an unreadable input cannot hide the overlap.

    Args:
        spec: the ``--input`` as given (a file, a directory or a glob).
        output: the ``--output`` directory.

    Raises:
        ConfigError: naming the input that overlaps and asking for a separate directory.
    """
    outputs = _forms(output)
    fix = "write the output to a directory outside the input (for example a sibling folder)"
    given = Path(spec)
    if given.is_dir():
        for folder in _forms(spec):
            for out in outputs:
                if _inside(folder, out):
                    raise ConfigError(
                        f"--output {str(output)!r} holds the input directory {spec!r}; {fix}: "
                        "batch-predict never writes where its input lives"
                    )
                if _inside(out, folder):
                    raise ConfigError(
                        f"--output {str(output)!r} lies inside the input directory {spec!r}, "
                        f"so later runs would read the parts as input; {fix}"
                    )
        return
    files = (
        [spec] if given.exists() or not glob.has_magic(spec) else glob.glob(spec, recursive=True)
    )
    for name in files:
        for form in _forms(name):
            if any(_inside(form, out) for out in outputs):
                raise ConfigError(
                    f"--output {str(output)!r} holds the input file {name!r}; {fix}: "
                    "batch-predict never writes where its input lives"
                )
    if given.exists() or not glob.has_magic(spec):
        return
    pattern = _glob_pattern(os.path.abspath(spec))
    for out in outputs:
        for name in ("part-00000.parquet", "part-00000.jsonl", "_manifest.json"):
            if pattern.match(str(out / name)):
                raise ConfigError(
                    f"the input glob {spec!r} would match files batch-predict writes in "
                    f"--output {str(output)!r} (such as {name}); {fix}"
                )
