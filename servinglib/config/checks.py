"""Checks of servinglib.yaml beyond its JSON Schema: contained paths, routed versions and
the model answering a precomputed version's misses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servinglib.errors import ConfigError

__all__ = [
    "check_routed_versions",
    "precomputed_fallback",
    "resolve_inside",
    "resolve_log_url",
]


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


def precomputed_fallback(
    entry: Mapping[str, Any],
    entries: Sequence[Mapping[str, Any]],
    root: Path,
    label: str,
    where: str,
) -> str | None:
    """The model whose lane answers a ``runtime: precomputed`` entry's misses (None: none).

    ``runtime_options.fallback_model`` names it; else ``fallback_version`` alone means the
    model that serves the same repository (the version the batch job scored with).
    """
    options = entry.get("runtime_options", {})
    named, version = options.get("fallback_model"), options.get("fallback_version")
    served = {e["name"]: e for e in entries}
    if named is not None:
        other = served.get(named)
        if other is None or named == entry["name"] or other.get("runtime") == "precomputed":
            raise ConfigError(
                f"fallback_model {named!r} is not a model that can answer misses; name another "
                f"configured model that is not runtime: precomputed (one of {sorted(served)})",
                source=label,
                key_path=f"{where}.runtime_options.fallback_model",
            )
        return str(named)
    if version is None:
        return None
    repository = (root / entry["repository"]).resolve()
    for other in entries:
        if (
            other.get("runtime") != "precomputed"
            and (root / other["repository"]).resolve() == repository
            and str(version) in other.get("versions", [str(version)])
            and (repository / str(version)).is_dir()
        ):
            return str(other["name"])
    raise ConfigError(
        f"fallback_version {version!r} of {entry['repository']!r} is a version no other model "
        "serves: add a model for it (e.g. class: your Model class, repository: "
        f"{entry['repository']}) so misses go through its lane, or name one with "
        "runtime_options.fallback_model",
        source=label,
        key_path=f"{where}.runtime_options.fallback_version",
    )
