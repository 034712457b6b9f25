"""Post-render checks: every rendered file parses and servinglib.yaml passes servinglib's schema.

They catch a broken template before a team ever sees the output. The thorough checks (Envoy,
Kubernetes schemas, the GitHub workflow schema, running the tests) are in the test suite.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path

import yaml

from servinglib_generator.errors import GeneratorError

__all__ = ["check_rendered_files"]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


_PARSERS: dict[str, Callable[[Path], object]] = {
    ".json": lambda path: json.loads(_read(path)),
    ".yaml": lambda path: list(yaml.safe_load_all(_read(path))),
    ".yml": lambda path: list(yaml.safe_load_all(_read(path))),
    ".toml": lambda path: tomllib.loads(_read(path)),
    ".py": lambda path: compile(_read(path), str(path), "exec"),
}


def check_rendered_files(repo: Path, paths: Iterable[Path]) -> None:
    """Parse each of ``paths`` (relative to ``repo``) by its type, then load servinglib.yaml.

    Raises:
        GeneratorError: naming the file that does not parse and why.
    """
    for relative in paths:
        parse = _PARSERS.get(relative.suffix)
        if parse is None:
            continue
        try:
            parse(repo / relative)
        except (ValueError, yaml.YAMLError, SyntaxError) as e:
            raise GeneratorError(
                f"generated file {relative} does not parse: {e}; this is a bug in the template"
            ) from e
    _check_config(repo / "servinglib.yaml")


def _check_config(path: Path) -> None:
    from servinglib.config.spec import load_config
    from servinglib.errors import ConfigError

    try:
        load_config(path, environ={})
    except ConfigError as e:
        raise GeneratorError(f"the generated {path.name} is invalid: {e}") from e
