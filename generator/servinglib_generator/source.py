"""Where a generated repository installs servinglib from (it is not on PyPI).

A checkout directory is built into a wheel, and a wheel is copied into the repository's
``wheels/``: CI and the image build need nothing outside the repository. Anything else is
used as a pip requirement (``servinglib==0.1.0`` from an internal index; a line such as
``--index-url https://pypi.internal/simple servinglib==0.1.0`` names the index too).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from servinglib_generator._validators import FieldError
from servinglib_generator.errors import GeneratorError

__all__ = [
    "ServinglibSource",
    "build_wheel",
    "default_servinglib_source",
    "parse_servinglib_source",
]

_REQUIREMENT = re.compile(
    r"^(?:--(?:extra-)?index-url[ =]\S+\s+)?"  # the index it comes from, if any
    r"servinglib(?:\[[a-z0-9,_-]+\])?\s*(?:(?:[=<>!~]=?=?|@)\s*\S.*)?$"
)


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
        # pip reads an index option on a line of its own, before the requirement
        return re.sub(r"^(--\S+?)[ =](\S+)\s+", r"\1 \2\n", self.value)


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
            "directory, a .whl file, or e.g. 'servinglib==0.1.0', "
            "'--index-url https://pypi.internal/simple servinglib==0.1.0' or "
            "'servinglib @ https://...'"
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


def build_wheel(checkout: Path, destination: Path) -> Path:
    """Build servinglib's wheel from ``checkout`` into ``destination``; return its path.

    Builds outside the checkout (a stale ``build/`` there could ship deleted modules), with
    the installed setuptools when it can (no download), else in pip's isolated build env.

    Raises:
        GeneratorError: pip could not build the wheel; the message has pip's output.
    """
    destination.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="servinglib-wheel-") as scratch:
        setup_cfg = Path(scratch) / "build.cfg"
        setup_cfg.write_text(
            f"[build]\nbuild_base = {scratch}/build\n[egg_info]\negg_base = {scratch}\n",
            encoding="utf-8",
        )
        env = {**os.environ, "DIST_EXTRA_CONFIG": str(setup_cfg)}
        command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
        command += ["--wheel-dir", str(destination), str(checkout)]
        result = subprocess.run(
            [*command, "--no-build-isolation"], capture_output=True, text=True, env=env, check=False
        )
        if result.returncode != 0:
            result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            raise GeneratorError(
                f"cannot build a servinglib wheel from {checkout}: {result.stderr[-1500:]}; "
                "build one yourself (`pip wheel --no-deps -w dist/ <checkout>`) and pass the .whl"
            )
    wheels = sorted(destination.glob("servinglib-*.whl"))
    if not wheels:
        raise GeneratorError(f"pip built no servinglib wheel from {checkout} into {destination}")
    return wheels[-1]
