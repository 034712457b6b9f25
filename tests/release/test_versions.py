"""Versions come from git tags: a tagged commit builds that version, any other a dev version."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not (ROOT / ".git").exists() or shutil.which("git") is None,
    reason="needs a git checkout (versions come from its tags)",
)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    target = tmp_path / "servinglib"
    git(tmp_path, "clone", "--quiet", "--no-hardlinks", str(ROOT), str(target))
    for tag in git(target, "tag").split():
        git(target, "tag", "-d", tag)  # the test decides which tags exist
    return target


def scm_version(checkout: Path) -> str:
    return subprocess.run(
        [sys.executable, "-m", "setuptools_scm"],
        cwd=checkout,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_a_tag_builds_that_version_and_a_later_commit_a_dev_version(clone: Path) -> None:
    git(clone, "tag", "v0.2.0")
    assert scm_version(clone) == "0.2.0"
    dist = clone / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(clone)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    assert sorted(p.name for p in dist.iterdir()) == [
        "servinglib-0.2.0-py3-none-any.whl",
        "servinglib-0.2.0.tar.gz",
    ]
    git(clone, "commit", "--quiet", "--allow-empty", "-m", "after the release")
    later = scm_version(clone)
    assert later.startswith("0.2.1.dev1+g"), later


def test_an_untagged_history_gets_a_dev_version_and_a_prerelease_tag_is_kept(
    clone: Path,
) -> None:
    assert ".dev" in scm_version(clone)
    git(clone, "tag", "v0.3.0rc1")
    assert scm_version(clone) == "0.3.0rc1"
