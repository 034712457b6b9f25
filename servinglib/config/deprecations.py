"""Deprecated ``servinglib.yaml`` keys: still read, with a warning naming the replacement.

A renamed key stays accepted for at least one minor release before it is removed
(docs/explanation/compatibility.md). Reading it moves its value to the new key,
warns with a :class:`DeprecationWarning` (which test suites turn into errors) and logs
one line naming the key, its replacement and the release that removes it.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servinglib.errors import ConfigError

__all__ = ["RENAMED_KEYS", "Renamed", "apply_renames"]

log = logging.getLogger("servinglib.config")


@dataclass(frozen=True)
class Renamed:
    """``old`` (a dotted path under the top level or under each model) became ``new``."""

    old: str
    new: str
    removed_in: str


# Nothing is deprecated yet. Entries look like
# Renamed("server.max_body_bytes", "server.max_request_body_bytes", removed_in="0.4.0").
RENAMED_KEYS: tuple[Renamed, ...] = ()


def apply_renames(
    raw: dict[str, Any], source: str, renames: tuple[Renamed, ...] = RENAMED_KEYS
) -> dict[str, Any]:
    """Move every deprecated key of ``raw`` to its replacement, warning once per key.

    Paths starting with ``models[].`` apply to each model entry.

    Raises:
        ConfigError: both the deprecated key and its replacement are set.
    """
    for renamed in renames:
        if renamed.old.startswith("models[]."):
            models = raw.get("models")
            targets = [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []
            old, new = renamed.old.removeprefix("models[]."), renamed.new.removeprefix("models[].")
        else:
            targets, old, new = [raw], renamed.old, renamed.new
        for target in targets:
            if _move(target, old, new, source, renamed):
                message = (
                    f"{source}: `{renamed.old}` is deprecated and will be removed in "
                    f"servinglib {renamed.removed_in}; use `{renamed.new}` instead"
                )
                warnings.warn(message, DeprecationWarning, stacklevel=3)
                log.warning(message)
    return raw


def _move(target: dict[str, Any], old: str, new: str, source: str, renamed: Renamed) -> bool:
    *old_parents, old_leaf = old.split(".")
    parent = _walk(target, old_parents)
    if parent is None or old_leaf not in parent:
        return False
    *new_parents, new_leaf = new.split(".")
    destination: dict[str, Any] = target
    for part in new_parents:
        child = destination.setdefault(part, {})
        if not isinstance(child, dict):
            return False  # the schema check names the wrong type
        destination = child
    if new_leaf in destination:
        raise ConfigError(
            f"both `{renamed.old}` (deprecated) and `{renamed.new}` are set; "
            f"keep only `{renamed.new}`",
            source=source,
            key_path=renamed.new,
        )
    destination[new_leaf] = parent.pop(old_leaf)
    return True


def _walk(node: Mapping[str, Any], parts: list[str]) -> dict[str, Any] | None:
    current: Any = node
    for part in parts:
        if not isinstance(current, dict) or part not in current:
            return None
        current = current[part]
    return current if isinstance(current, dict) else None
