"""Publish local model versions to a URL repository, as CI does after the self-tests pass.

A version is uploaded under a hidden staging prefix named by its content digest
(``.staging-<digest>/``: not a version name, so no server lists it), then copied into its
version prefix inside the store while :data:`~servinglib.lifecycle.store.PUBLISHING_MARKER`
stands there, and the marker is deleted last: a server lists the version whole or not at
all. Versions are immutable: publishing a version the store holds with the same content does
nothing, with other content it is refused. A publish killed half-way leaves the marker, so
the version stays invisible until the publish is run again.

Example::

    results = publish_versions(Path("models/eta"), "s3://team-models/eta-service/eta")
    for result in results:
        print(result.version, result.state, result.digest)
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servinglib.lifecycle.artifacts import NAME_PATTERN, version_sort_key
from servinglib.lifecycle.store import PUBLISHING_MARKER, StoreError

__all__ = ["PublishResult", "publish_versions"]

log = logging.getLogger("servinglib.lifecycle.publish")

_CHUNK = 1 << 20


@dataclass(frozen=True)
class PublishResult:
    """What publishing one version did.

    ``state`` is ``published`` (copied in now) or ``unchanged`` (the store holds the same
    content); ``files`` maps each relative path to its sha256, the values of the
    ``sha256:`` pins in servinglib.yaml.
    """

    version: str
    url: str
    state: str
    digest: str
    files: dict[str, str]


def _sha256_of(handle: Any) -> str:
    digest = hashlib.sha256()
    while chunk := handle.read(_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def _content_digest(files: dict[str, str]) -> str:
    """One digest of a version: its sorted relative paths with their file digests."""
    lines = "".join(f"{path}\0{digest}\n" for path, digest in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def _local_versions(repository: Path, only: list[str] | None) -> list[Path]:
    if not repository.is_dir():
        raise StoreError(f"{repository} is not a directory; give a model's local repository")
    found = {p.name: p for p in repository.iterdir() if p.is_dir() and NAME_PATTERN.match(p.name)}
    missing = sorted(set(only or ()) - set(found))
    if missing:
        raise StoreError(f"{repository} has no version {missing}; its versions: {sorted(found)}")
    names = only if only is not None else sorted(found, key=version_sort_key)
    return [found[name] for name in names]


def _store_digests(fs: Any, prefix: str) -> dict[str, str] | None:
    """The files of a complete store version with their sha256; None when absent or partial."""
    if not fs.exists(prefix):
        return None
    files = fs.find(prefix)
    if not files or f"{prefix}/{PUBLISHING_MARKER}" in files:
        return None
    digests = {}
    for path in files:
        with fs.open(path, "rb") as handle:
            digests[path.removeprefix(f"{prefix}/")] = _sha256_of(handle)
    return digests


def _publish_one(fs: Any, root: str, url: str, directory: Path) -> PublishResult:
    version = directory.name
    local = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        with path.open("rb") as handle:
            local[path.relative_to(directory).as_posix()] = _sha256_of(handle)
    if not local:
        raise StoreError(f"{directory} holds no file; a version needs its artifacts")
    digest = _content_digest(local)
    target = f"{root}/{version}"
    held = _store_digests(fs, target)
    if held is not None:
        if _content_digest(held) != digest:
            raise StoreError(
                f"{url}/{version} already holds other content (digest "
                f"{_content_digest(held)[:16]}, local {digest[:16]}); versions are "
                "immutable: publish this one under a new version name"
            )
        return PublishResult(version, f"{url}/{version}", "unchanged", digest, local)
    staging = f"{root}/.staging-{digest[:32]}"
    for relative in local:
        fs.put_file(str(directory / relative), f"{staging}/{relative}")
    fs.pipe_file(f"{target}/{PUBLISHING_MARKER}", b"")  # hides the version while it fills
    for relative in local:
        fs.copy(f"{staging}/{relative}", f"{target}/{relative}")
    fs.rm(f"{target}/{PUBLISHING_MARKER}")  # the version appears whole
    fs.rm(staging, recursive=True)
    log.info("published %s/%s (%d files, digest %s)", url, version, len(local), digest[:16])
    return PublishResult(version, f"{url}/{version}", "published", digest, local)


def publish_versions(
    repository: Path, url: str, versions: list[str] | None = None
) -> list[PublishResult]:
    """Publish the versions of a local ``repository`` (every one, or ``versions``) to ``url``.

    Credentials and endpoint come from the store library's standard chain, as for serving.

    Raises:
        StoreError: a version is missing locally, differs from the store's copy, or the store
            cannot be written.
    """
    import fsspec

    directories = _local_versions(repository, versions)
    try:
        fs, root = fsspec.core.url_to_fs(url)
        fs.invalidate_cache()  # what another process wrote since this one last looked
        root = str(root).rstrip("/")
        return [_publish_one(fs, root, url.rstrip("/"), d) for d in directories]
    except StoreError:
        raise
    except Exception as e:  # every store library raises its own types
        raise StoreError(f"cannot publish to {url}: {type(e).__name__}: {e}") from e
