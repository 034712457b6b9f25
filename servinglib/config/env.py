"""``SERVINGLIB_*`` environment variables that override ``server:`` keys of servinglib.yaml."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from servinglib.errors import ConfigError

__all__ = ["CONFIG_ENV", "DEFAULT_CONFIG", "ENV_PREFIX", "apply_env_overrides"]

# The variable naming the config file, and its default: every command and worker reads them.
CONFIG_ENV = "SERVINGLIB_CONFIG"
DEFAULT_CONFIG = "servinglib.yaml"

ENV_PREFIX = "SERVINGLIB_"


def _boolean(value: str) -> bool:
    words = {"true": True, "1": True, "false": False, "0": False}
    if value.strip().lower() not in words:
        raise ValueError(value)
    return words[value.strip().lower()]


# JSON Schema type -> (conversion, what the value should have been); others stay strings.
_CONVERSIONS: dict[str, tuple[Callable[[str], Any], str]] = {
    "integer": (int, "an integer; set a whole number"),
    "number": (float, "a number; set one such as 2.5"),
    "boolean": (_boolean, "a boolean; set true or false"),
}


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
        convert = _CONVERSIONS.get(spec.get("type", ""))
        if convert is not None:
            kind, hint = convert
            try:
                server[key] = kind(value)
            except ValueError as e:
                raise ConfigError(f"{value!r} is not {hint}", source=f"${var}") from e
        else:
            server[key] = value
    if server:
        raw = {**raw, "server": server}
    return raw
