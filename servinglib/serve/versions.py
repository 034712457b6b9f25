"""The oldest gunicorn servinglib's server runs on, checked before gunicorn reads a setting.

servinglib passes gunicorn settings older releases do not know (``control_socket_disable``
came in 25.1) and subclasses its gthread worker (``TConn`` and ``gunicorn.http2`` as of
27.0): on an older gunicorn, ``servinglib serve`` would stop at ``No configuration setting
for: control_socket_disable``. ``bin/test-lowest`` runs the server tests on this floor.
"""

from __future__ import annotations

import importlib.metadata
import re

from servinglib.errors import ConfigError

__all__ = ["GUNICORN_MINIMUM", "check_gunicorn", "version_tuple"]

GUNICORN_MINIMUM = "27.0.1"  # == the floor in pyproject.toml (a test holds them equal)


def version_tuple(text: str) -> tuple[int, ...]:
    """``"27.0.1"`` -> ``(27, 0, 1)`` (local and pre-release parts ignored)."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+", maxsplit=1)[0])[:3])


def check_gunicorn(installed: str | None = None) -> None:
    """Refuse a gunicorn older than :data:`GUNICORN_MINIMUM` (``installed``: its version).

    Raises:
        ConfigError: naming both versions and the command that fixes it.
    """
    if installed is None:
        try:
            installed = importlib.metadata.version("gunicorn")
        except importlib.metadata.PackageNotFoundError:
            installed = "0"
    if version_tuple(installed) < version_tuple(GUNICORN_MINIMUM):
        raise ConfigError(
            f"gunicorn {installed} is older than {GUNICORN_MINIMUM}, the oldest servinglib's "
            f"server runs on; pip install 'gunicorn>={GUNICORN_MINIMUM}'"
        )
