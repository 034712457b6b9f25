"""Real client tools the conformance tests run, built once into a cache directory.

- KServe's SDK lives in a virtualenv of its own: its pins (``protobuf<7``, ``pandas<3``,
  ``python-dateutil<3``) would downgrade packages of the test environment.
- ``perf_analyzer`` comes from the ``tritonclient`` 2.50.0 wheel (later wheels need a
  newer glibc), with the two shared libraries it links: ``libcudart`` from NVIDIA's CUDA
  runtime wheel (loaded, never used: no GPU is needed for HTTP) and ``libb64`` from Debian.

Everything comes from package registries (PyPI, Debian). The cache is
``$SERVINGLIB_TEST_CACHE`` or ``~/.cache/servinglib-tests``; a tool that cannot be built
skips its tests with the reason.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["cache_dir", "kserve_python", "perf_analyzer"]

KSERVE = "kserve==0.21.0"
TRITONCLIENT = "tritonclient==2.50.0"


def cache_dir() -> Path:
    """Where built tools are kept between runs."""
    root = os.environ.get("SERVINGLIB_TEST_CACHE") or Path.home() / ".cache" / "servinglib-tests"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def _locked(name: str) -> Iterator[Path]:
    """The cache entry ``name``, held against concurrent builders (xdist, parallel runs)."""
    target = cache_dir() / name
    with (cache_dir() / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield target


def _run(command: list[str], what: str, cwd: Path | None = None) -> None:
    result = subprocess.run(
        command, check=False, capture_output=True, text=True, cwd=cwd, timeout=600
    )
    if result.returncode != 0:
        pytest.skip(f"cannot build {what}: {' '.join(command)} failed:\n{result.stderr[-2000:]}")


def kserve_python() -> Path:
    """The interpreter of a virtualenv with KServe's SDK installed (built on first use)."""
    with _locked("kserve-0.21.0") as venv:
        python = venv / "bin" / "python"
        if not (venv / "ready").is_file():
            shutil.rmtree(venv, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(venv)], "the KServe SDK virtualenv")
            _run([str(python), "-m", "pip", "install", "-q", KSERVE], "the KServe SDK")
            (venv / "ready").write_text(KSERVE + "\n")
        return python


def perf_analyzer() -> tuple[list[str], dict[str, str]]:
    """The ``perf_analyzer`` command and the environment it needs (built on first use)."""
    with _locked("perf_analyzer-2.50.0") as root:
        binary, lib = root / "bin" / "perf_analyzer", root / "lib"
        if not (root / "ready").is_file():
            shutil.rmtree(root, ignore_errors=True)
            _build_perf_analyzer(root)
            (root / "ready").write_text(TRITONCLIENT + "\n")
        env = {**os.environ, "LD_LIBRARY_PATH": str(lib)}
        return [str(binary)], env


def _build_perf_analyzer(root: Path) -> None:
    if shutil.which("apt-get") is None:
        pytest.skip("cannot build perf_analyzer: apt-get (for Debian's libb64) is missing")
    with tempfile.TemporaryDirectory() as scratch:
        wheels = Path(scratch) / "wheels"
        for package in (TRITONCLIENT, "nvidia-cuda-runtime-cu12"):
            _run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--no-deps",
                    package,
                    "-d",
                    str(wheels),
                ],
                f"perf_analyzer ({package})",
            )
        extracted = Path(scratch) / "x"
        for wheel in wheels.glob("*.whl"):
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(extracted)
        (root / "bin").mkdir(parents=True)
        (root / "lib").mkdir()
        found = [p for p in extracted.rglob("perf_analyzer") if p.is_file()]
        if not found:
            pytest.skip(f"cannot build perf_analyzer: {TRITONCLIENT} holds no perf_analyzer binary")
        shutil.copy(found[0], root / "bin" / "perf_analyzer")
        (root / "bin" / "perf_analyzer").chmod(0o755)
        for library in extracted.rglob("libcudart.so*"):
            shutil.copy(library, root / "lib")
        debs = Path(scratch) / "debs"
        debs.mkdir()
        download = ["apt-get", "download", "libb64-0d"]
        fetched = subprocess.run(download, check=False, capture_output=True, cwd=debs, timeout=300)
        if fetched.returncode != 0 and os.geteuid() == 0:  # a fresh image has no package lists
            _run(["apt-get", "update", "-q"], "perf_analyzer (apt-get update)")
        if fetched.returncode != 0:
            _run(download, "perf_analyzer (Debian's libb64-0d)", cwd=debs)
        for deb in debs.glob("*.deb"):
            _run(["dpkg-deb", "-x", str(deb), str(debs / "x")], "perf_analyzer (libb64)")
        for library in (debs / "x").rglob("libb64.so*"):
            shutil.copy(library, root / "lib", follow_symlinks=True)
