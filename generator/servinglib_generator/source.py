"""Where a generated repository installs servinglib from (it is not on PyPI).

A checkout directory becomes ``servinglib @ file:///...``; a wheel is copied into the
repository's ``wheels/`` so CI and the image build need nothing outside the repository;
anything else is used as a pip requirement (``servinglib==0.1.0`` from an internal index).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from servinglib_generator._validators import FieldError

__all__ = ["ServinglibSource", "default_servinglib_source", "parse_servinglib_source"]

_REQUIREMENT = re.compile(r"^servinglib(?:\[[a-z0-9,_-]+\])?\s*(?:(?:[=<>!~]=?=?|@)\s*\S.*)?$")


@dataclass(frozen=True)
class ServinglibSource:
    """``kind``: ``directory`` (a checkout), ``wheel`` or ``requirement``; ``value``: which."""

    kind: Literal["directory", "wheel", "requirement"]
    value: str

    def requirement_line(self) -> str:
        """The line of requirements.txt that installs servinglib."""
        if self.kind == "directory":
            return f"servinglib @ {Path(self.value).as_uri()}"
        if self.kind == "wheel":
            return f"./wheels/{Path(self.value).name}"
        return self.value


def parse_servinglib_source(value: str) -> ServinglibSource:
    """Classify an answer as a checkout directory, a wheel file or a pip requirement."""
    if value.endswith(".whl") or re.match(r"^[./~]", value):
        path = Path(value).expanduser().resolve()
        if value.endswith(".whl"):
            if not path.is_file():
                raise FieldError(f"wheel {value!r} ({path}) does not exist; build it first")
            return ServinglibSource("wheel", str(path))
        if not (path / "pyproject.toml").is_file():
            raise FieldError(
                f"{value!r} ({path}) is not a servinglib checkout (no pyproject.toml); give the "
                "checkout directory, a .whl file or a requirement such as 'servinglib==0.1.0'"
            )
        return ServinglibSource("directory", str(path))
    if not _REQUIREMENT.match(value):
        raise FieldError(
            f"{value!r} is neither a path nor a servinglib requirement; give a checkout "
            "directory, a .whl file, or e.g. 'servinglib==0.1.0' or 'servinglib @ https://...'"
        )
    return ServinglibSource("requirement", value)


def default_servinglib_source() -> str:
    """The checkout this generator runs from, else a pin of the installed servinglib."""
    spec = importlib.util.find_spec("servinglib")
    if spec is not None and spec.origin is not None:
        root = Path(spec.origin).resolve().parent.parent
        if _is_servinglib_checkout(root):
            return str(root)
    try:
        return f"servinglib=={importlib.metadata.version('servinglib')}"
    except importlib.metadata.PackageNotFoundError:
        return "servinglib"


def _is_servinglib_checkout(root: Path) -> bool:
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return False
    try:
        name = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["name"]
    except (tomllib.TOMLDecodeError, KeyError, TypeError):
        return False
    return bool(name == "servinglib")
