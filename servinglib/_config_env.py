"""``SERVINGLIB_*`` environment variables that override ``server:`` keys of servinglib.yaml."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servinglib.errors import ConfigError

__all__ = ["ENV_PREFIX", "apply_env_overrides"]

ENV_PREFIX = "SERVINGLIB_"


def apply_env_overrides(
    raw: dict[str, Any], environ: Mapping[str, str], server_schema: Mapping[str, Any]
) -> dict[str, Any]:
    """``raw`` with ``SERVINGLIB_<KEY>`` variables applied to its ``server:`` keys."""
    server = dict(raw.get("server") or {})
    for key, spec in server_schema.items():
        var = ENV_PREFIX + key.upper()
        if var not in environ:
            continue
        value = environ[var]
        if spec.get("type") == "integer":
            try:
                server[key] = int(value)
            except ValueError as e:
                raise ConfigError(
                    f"{value!r} is not an integer; set a whole number", source=f"${var}"
                ) from e
        elif spec.get("type") == "number":
            try:
                server[key] = float(value)
            except ValueError as e:
                raise ConfigError(
                    f"{value!r} is not a number; set one such as 2.5", source=f"${var}"
                ) from e
        else:
            server[key] = value
    if server:
        raw = {**raw, "server": server}
    return raw
