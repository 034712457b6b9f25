"""Model repositories in object storage: URL checks and the per-server local cache.

A ``repository:`` that is a URL (``s3://bucket/prefix/model``, ``gs://…``, ``file://…``,
any fsspec protocol whose package is installed) is served from a local copy under
``model_cache.dir``; :mod:`servinglib.lifecycle.store` fills it.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servinglib.config.checks import resolve_inside
from servinglib.errors import ConfigError

__all__ = [
    "ModelCacheConfig",
    "ModelSyncConfig",
    "cache_config",
    "check_store_url",
    "is_url",
    "repository_of",
    "url_cache_path",
]

_URL = re.compile(r"^([a-z][a-z0-9+.-]*)://", re.IGNORECASE)


@dataclass(frozen=True)
class ModelCacheConfig:
    """``model_cache:``: where URL repositories are copied, and how much they may take."""

    dir: Path
    max_bytes: int = 0  # 0: no bound


@dataclass(frozen=True)
class ModelSyncConfig:
    """A model's ``model_sync:``: poll its store for new versions."""

    interval_s: float = 60.0
    promote: str = "never"  # never | when_ready


def is_url(repository: str) -> bool:
    """Whether ``repository`` names a store (``scheme://…``) rather than a directory."""
    return _URL.match(repository) is not None


def cache_config(raw: Mapping[str, Any] | None, root: Path) -> ModelCacheConfig:
    """``model_cache:`` with its default directory (``$XDG_CACHE_HOME/servinglib/models``)."""
    raw = raw or {}
    given = raw.get("dir")
    if given is None:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        directory = Path(base) / "servinglib" / "models"
    else:
        directory = (root / os.path.expanduser(given)).resolve()
    return ModelCacheConfig(dir=directory, max_bytes=int(raw.get("max_bytes", 0)))


def url_cache_path(cache: ModelCacheConfig, url: str) -> Path:
    """The cache directory of one URL repository (readable name, unique digest)."""
    tail = re.sub(r"[^A-Za-z0-9._-]+", "_", url.rstrip("/").rsplit("/", 1)[-1])[:40]
    return cache.dir / f"{tail}-{hashlib.sha256(url.encode()).hexdigest()[:16]}"


def check_store_url(url: str, label: str, key_path: str) -> None:
    """Refuse a URL whose protocol has no installed fsspec implementation, naming the fix."""
    match = _URL.match(url)
    protocol = match.group(1).lower() if match else ""
    try:
        import fsspec
    except ImportError:
        raise ConfigError(
            f"{url!r} is a URL repository, which needs fsspec; install the store extra: "
            "pip install 'servinglib[store]'",
            source=label,
            key_path=key_path,
        ) from None
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError as e:
        raise ConfigError(
            f"{url!r}: the {protocol}:// protocol needs a package that is not installed ({e}); "
            "install it (s3:// is in the store extra: pip install 'servinglib[store]')",
            source=label,
            key_path=key_path,
        ) from None
    except ValueError:
        raise ConfigError(
            f"{url!r}: fsspec knows no protocol {protocol!r}; use s3://, gs://, file:// or "
            "another fsspec protocol, or a directory relative to servinglib.yaml",
            source=label,
            key_path=key_path,
        ) from None


def repository_of(
    entry: Mapping[str, Any], root: Path, cache: ModelCacheConfig, label: str, where: str
) -> tuple[Path, str | None]:
    """A model entry's repository directory, and its store URL when it has one (the
    directory is then the URL's cache)."""
    given = str(entry["repository"])
    key_path = f"{where}.repository"
    if is_url(given):
        check_store_url(given, label, key_path)
        return url_cache_path(cache, given), given
    repository = resolve_inside(root, given, label=label, key_path=key_path)
    if not repository.is_dir():
        raise ConfigError(
            f"model repository {given!r} ({repository}) is not a directory; "
            "create it with one sub-directory per version",
            source=label,
            key_path=key_path,
        )
    return repository, None
