"""Copy model versions from object storage into the server's local cache.

Each URL repository has one cache directory (:func:`servinglib.config.storage.url_cache_path`)
holding one sub-directory per version, exactly like a local repository, so discovery, the
sha256 pins, the pickle scan and every artifact check run on the copied files unchanged.

A version is downloaded into a hidden temporary directory and renamed into place when
complete: a half-downloaded version (a killed process, a store that went away) is never
visible under its name. A store version that holds :data:`PUBLISHING_MARKER` is being
published (:mod:`servinglib.lifecycle.publish` copies its files in, then deletes the marker)
and is not listed until the marker is gone. An exclusive file lock per repository makes
processes that share the cache download each version once; a temporary directory left by a
killed process is removed by the next holder of the lock.

Credentials and endpoints come from the store library's own chains (for s3://, botocore's:
``AWS_*`` variables, ``~/.aws``, instance or workload identity) and from fsspec's config
(``FSSPEC_<PROTOCOL>_<OPTION>`` variables), never from servinglib.yaml.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servinglib.config.spec import ModelConfig, ServiceConfig
from servinglib.errors import ServinglibError
from servinglib.lifecycle.artifacts import NAME_PATTERN, version_sort_key

__all__ = [
    "PUBLISHING_MARKER",
    "StoreError",
    "StoreListing",
    "cached_versions",
    "fetch_version",
    "list_store",
    "require_synced",
    "sync_model",
    "sync_service",
]

log = logging.getLogger("servinglib.lifecycle.store")

PUBLISHING_MARKER = ".publishing"
"""An object under a store version while it is being published: the version is not listed."""

_TMP_PREFIX = ".partial-"
_LOCK_NAME = ".lock"


class StoreError(ServinglibError):
    """The store could not be listed or read."""


@dataclass(frozen=True)
class StoreListing:
    """The versions of a URL repository, each with a signature of its files."""

    versions: dict[str, tuple[tuple[str, int, str], ...]]


def _filesystem(url: str) -> tuple[Any, str]:
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    return fs, str(root).rstrip("/")


def list_store(model: ModelConfig) -> StoreListing:
    """List the store's versions of ``model`` (its ``versions`` list only, when given).

    Raises:
        StoreError: the store cannot be reached or listed.
    """
    url = _url(model)
    try:
        fs, root = _filesystem(url)
        fs.invalidate_cache()  # a poll must see versions uploaded since the last one
        entries = fs.ls(root, detail=True)
        names = [
            str(e["name"]).rstrip("/").rsplit("/", 1)[-1]
            for e in entries
            if e.get("type") == "directory"
        ]
        wanted = set(model.versions) if model.versions is not None else None
        versions = {}
        for name in sorted(names, key=version_sort_key):
            if not NAME_PATTERN.match(name) or (wanted is not None and name not in wanted):
                continue
            files = fs.find(f"{root}/{name}", detail=True)
            if f"{root}/{name}/{PUBLISHING_MARKER}" in files:
                continue  # its publisher has not finished copying it in
            versions[name] = tuple(
                sorted(
                    (
                        path.removeprefix(f"{root}/{name}/"),
                        int(info.get("size") or 0),
                        str(info.get("ETag") or info.get("etag") or info.get("mtime") or ""),
                    )
                    for path, info in files.items()
                    if info.get("type") != "directory"
                )
            )
    except Exception as e:  # every store library raises its own types
        raise StoreError(f"cannot list {url}: {type(e).__name__}: {e}") from e
    return StoreListing(versions)


def cached_versions(model: ModelConfig) -> list[str]:
    """Complete versions in the cache of ``model`` (never a partial download)."""
    if not model.repository.is_dir():
        return []
    return sorted(
        (p.name for p in model.repository.iterdir() if p.is_dir() and NAME_PATTERN.match(p.name)),
        key=version_sort_key,
    )


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / _LOCK_NAME).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fetch_version(model: ModelConfig, version: str, files: tuple[str, ...]) -> bool:
    """Download one version into the cache unless it is there; True when it downloaded.

    Raises:
        StoreError: a file could not be read; nothing of the version is left visible.
    """
    url = _url(model)
    target = model.repository / version
    with _locked(model.repository):
        for stale in model.repository.glob(f"{_TMP_PREFIX}*"):  # of a killed downloader
            shutil.rmtree(stale, ignore_errors=True)
        if target.is_dir():
            return False
        partial = model.repository / f"{_TMP_PREFIX}{version}-{uuid.uuid4().hex[:8]}"
        partial.mkdir()
        started = time.perf_counter()
        try:
            fs, root = _filesystem(url)
            for relative in files:
                local = (partial / relative).resolve()
                if not local.is_relative_to(partial.resolve()):
                    raise StoreError(f"{url}/{version}/{relative} leaves the version directory")
                local.parent.mkdir(parents=True, exist_ok=True)
                fs.get_file(f"{root}/{version}/{relative}", str(local))
            os.rename(partial, target)  # the version appears whole or not at all
        except Exception as e:
            shutil.rmtree(partial, ignore_errors=True)
            if isinstance(e, StoreError):
                raise
            raise StoreError(f"cannot download {url}/{version}: {type(e).__name__}: {e}") from e
    log.info(
        "model %r: downloaded version %r from %s (%d files, %.2fs)",
        model.name,
        version,
        url,
        len(files),
        time.perf_counter() - started,
    )
    return True


def _evict(model: ModelConfig, keep: set[str]) -> None:
    """Remove cached versions the store no longer offers (or the config no longer names)."""
    with _locked(model.repository):
        for version in cached_versions(model):
            if version not in keep:
                shutil.rmtree(model.repository / version, ignore_errors=True)
                log.info("model %r: evicted version %r from the cache", model.name, version)


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def sync_model(
    model: ModelConfig, listing: StoreListing | None = None, *, evict: bool = True
) -> list[str]:
    """Bring the cache of ``model`` up to the store; returns the versions downloaded now.

    ``evict`` removes cached versions the listing does not name (at start, before any
    worker loaded them; never while serving).

    Raises:
        StoreError: the store cannot be listed or a version not read.
    """
    listing = listing if listing is not None else list_store(model)
    if evict:
        _evict(model, set(listing.versions))
    downloaded = []
    for version, files in listing.versions.items():
        if fetch_version(model, version, tuple(f[0] for f in files)):
            downloaded.append(version)
    return downloaded


def sync_service(config: ServiceConfig) -> dict[str, str]:
    """Sync every URL repository once; returns the error of each model whose store failed.

    A failed store leaves the cache as it was: the versions already there are served.

    Raises:
        StoreError: the cache is over ``model_cache.max_bytes``.
    """
    errors = {}
    for model in config.models:
        if model.repository_url is None:
            continue
        model.repository.mkdir(parents=True, exist_ok=True)
        try:
            sync_model(model)
        except StoreError as e:
            errors[model.name] = str(e)
            cached = cached_versions(model)
            log.error(
                "model %r: %s; %s",
                model.name,
                e,
                f"serving the cached versions {cached}"
                if cached
                else "no version is cached: the model is not ready until the store answers",
            )
    bound = config.model_cache.max_bytes
    if bound:
        used = _size(config.model_cache.dir)
        if used > bound:
            raise StoreError(
                f"the model cache {config.model_cache.dir} holds {used} bytes, over "
                f"model_cache.max_bytes={bound}; raise the bound or serve fewer versions"
            )
    return errors


def require_synced(config: ServiceConfig) -> None:
    """Sync every URL repository for a tool (selftest, batch-predict, profile), which must
    test or score exactly what is in the store.

    Raises:
        StoreError: naming each store that could not be read.
    """
    failures = sync_service(config)
    if failures:
        raise StoreError(
            "; ".join(f"model {name!r}: {error}" for name, error in failures.items())
            + "; check the store's credentials (the library's standard chain) and endpoint"
        )


def _url(model: ModelConfig) -> str:
    if model.repository_url is None:
        raise StoreError(f"model {model.name!r} has a local repository, not a URL")
    return model.repository_url
