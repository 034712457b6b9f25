"""Where a generated repository installs servinglib from.

By default, a version range from a package index: ``servinglib>=0.2,<0.3`` for the
generator's own servinglib 0.2.x (patch releases arrive by themselves, a new minor version
when the team changes the range). A requirement names an exact pin or another index
(``--index-url https://pypi.internal/simple servinglib==0.2.1``). For air-gapped builds, a
wheel is copied into the repository's ``wheels/`` and a checkout directory is built into
one there: CI and the image build then need nothing outside the repository.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from servinglib_generator._validators import FieldError
from servinglib_generator.errors import GeneratorError

__all__ = [
    "EXTRAS",
    "ServinglibSource",
    "build_wheel",
    "compatible_range",
    "default_servinglib_source",
    "parse_servinglib_source",
]

# The extras every generated repository installs: tracing (OpenTelemetry over OTLP), since
# its Envoy config and Terraform send traces to a collector.
EXTRAS = ("tracing",)
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
        """The line of requirements.txt that installs servinglib, with the extras of
        :data:`EXTRAS` (the generated Envoy config and Terraform turn tracing on)."""
        extras = ",".join(EXTRAS)
        if self.kind == "directory":
            return f"servinglib[{extras}] @ {Path(self.value).as_uri()}"
        if self.kind == "wheel":
            return f"./wheels/{Path(self.value).name}[{extras}]"
        # pip reads an index option on a line of its own, before the requirement
        lines = re.sub(r"^(--\S+?)[ =](\S+)\s+", r"\1 \2\n", self.value).split("\n")
        lines[-1] = re.sub(r"^servinglib(?:\[([a-z0-9,_-]+)\])?", _with_extras, lines[-1])
        return "\n".join(lines)


def _with_extras(match: re.Match[str]) -> str:
    """``servinglib[<given extras and EXTRAS>]``."""
    given = [e for e in (match.group(1) or "").split(",") if e]
    return f"servinglib[{','.join(sorted({*given, *EXTRAS}))}]"


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
    """The range of releases compatible with the installed servinglib (see compatible_range)."""
    try:
        return compatible_range(importlib.metadata.version("servinglib"))
    except importlib.metadata.PackageNotFoundError:
        return "servinglib"


_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?P<pre>(?:a|b|rc|\.dev)\d+)?")


def compatible_range(version: str) -> str:
    """The requirement for releases compatible with ``version`` under the compatibility policy.

    Before 1.0 a minor release may change the public surface, so the range ends at the next
    minor (``0.2.1`` -> ``servinglib>=0.2,<0.3``); from 1.0 at the next major
    (``1.4.0`` -> ``servinglib>=1.4,<2``). A pre-release or development build (a checkout
    between tags) starts the range at itself, so pip may choose it
    (``0.3.0.dev5+g1a2b`` -> ``servinglib>=0.3.0.dev5,<0.4``).
    """
    match = _VERSION.match(version)
    if match is None:
        return "servinglib"
    major, minor = int(match.group(1)), int(match.group(2))
    upper = f"0.{minor + 1}" if major == 0 else f"{major + 1}"
    lower = f"{major}.{minor}"
    if match.group("pre"):
        lower = match.group(0)
    return f"servinglib>={lower},<{upper}"


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
