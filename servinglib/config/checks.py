"""Checks of servinglib.yaml beyond its JSON Schema: contained paths and routed versions."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servinglib.errors import ConfigError

__all__ = ["check_routed_versions", "resolve_inside", "resolve_log_url"]


def resolve_inside(root: Path, relative: str, *, label: str, key_path: str) -> Path:
    """Resolve ``relative`` against ``root`` and refuse anything that escapes ``root``."""
    candidate = (root / relative).resolve()
    if not candidate.is_relative_to(root.resolve()):
        raise ConfigError(
            f"{relative!r} resolves to {candidate}, outside {root}; keep every path inside the "
            "directory of servinglib.yaml",
            source=label,
            key_path=key_path,
        )
    return candidate


def check_routed_versions(
    entry: Mapping[str, Any], repository: Path, label: str, where: str
) -> None:
    """Versions named by ``traffic`` and ``shadow`` must have a directory."""
    named = [(f"{where}.traffic", v) for v in entry.get("traffic", {})]
    named += [
        (f"{where}.shadow[{i}].version", s["version"])
        for i, s in enumerate(entry.get("shadow", []))
    ]
    listed = entry.get("versions")
    for key_path, version in named:
        if listed is not None and version not in listed:
            raise ConfigError(
                f"version {version!r} is not in this model's `versions` list, so it is never "
                "loaded; add it there",
                source=label,
                key_path=key_path,
            )
        if not (repository / version).is_dir():
            raise ConfigError(
                f"version {version!r} has no directory in {repository}; add it or remove it here",
                source=label,
                key_path=key_path,
            )
    traffic = entry.get("traffic")
    if traffic is not None and sum(traffic.values()) <= 0:
        raise ConfigError(
            "traffic weights must add up to more than 0", source=label, key_path=f"{where}.traffic"
        )
    for i, shadow in enumerate(entry.get("shadow", [])):
        comparator = shadow.get("comparator", {})
        if comparator.get("kind") == "custom" and "function" not in comparator:
            raise ConfigError(
                "a custom comparator needs `function: module:function`",
                source=label,
                key_path=f"{where}.shadow[{i}].comparator",
            )


def resolve_log_url(url: str, root: Path, label: str) -> str:
    """Resolve a relative SQLite path against ``root`` (and keep it inside)."""
    if not url.startswith("sqlite:///"):
        return url
    path = url.removeprefix("sqlite:///")
    if path.startswith("/"):
        return url
    resolved = resolve_inside(root, path, label=label, key_path="monitoring.prediction_log.url")
    return f"sqlite:///{resolved}"
