"""Rendering repositories and running the real validators, for the generator tests."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from servinglib_generator import build_service_spec, generate_service

from tests.conftest import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNTIMES = ("python", "onnx", "torch")


def render(output_dir: Path, runtime: str = "python", **answers: str) -> Path:
    """Render a repository for team ``eta``, model ``eta``, installing servinglib from here."""
    spec = build_service_spec(
        {
            "team": "eta",
            "model": "eta",
            "runtime": runtime,
            "servinglib": str(REPO_ROOT),
            **answers,
        }
    )
    return generate_service(spec, output_dir)


def needs_runtime(runtime: str) -> None:
    """Skip when the package that builds the runtime's starter artifact is not installed."""
    package = {"onnx": "onnx", "torch": "torch"}.get(runtime)
    if package and importlib.util.find_spec(package) is None:
        pytest.skip(f"runtime={runtime} needs {package} at generation time; it is not installed")


def tool(name: str) -> str:
    """A command installed with the dev dependencies, next to this interpreter or on PATH."""
    found = shutil.which(
        name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    if found is None:
        pytest.fail(f"{name} not found; install the dev dependencies: pip install -e '.[dev]'")
    return found


def run(
    command: Sequence[str | os.PathLike[str]],
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``command``; fail the test with its output unless it exits 0."""
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=dict(env) if env is not None else None,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, command))} exited {result.returncode}\n"
            f"stdout:\n{result.stdout[-6000:]}\nstderr:\n{result.stderr[-6000:]}"
        )
    return result


def by_name(items: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The entry of an Envoy list (listeners, clusters) called ``name``."""
    (found,) = [item for item in items if item["name"] == name]
    return found


def loopback_grpc(config: dict[str, Any], app_grpc_port: int) -> int:
    """Point a generated Envoy config's gRPC listener at a free loopback port and its
    ``app_grpc`` cluster at ``app_grpc_port`` (the app's server.grpc_port); returns the
    listener's port."""
    port = free_port()
    listener = by_name(config["static_resources"]["listeners"], "ingress_grpc")
    listener["address"]["socket_address"].update(address="127.0.0.1", port_value=port)
    cluster = by_name(config["static_resources"]["clusters"], "app_grpc")
    endpoint = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    endpoint["address"]["socket_address"]["port_value"] = app_grpc_port
    return port


def assert_all_passed(stdout: str, at_least: int) -> None:
    """pytest's summary says only "N passed" (no failure, error or skip), N >= ``at_least``.

    A lower bound, not an exact count: each capability adds tests to the generated repo
    (service, models, publish, prediction sinks...).
    """
    summary = stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"(\d+) passed in .*", summary)
    assert match is not None, stdout
    assert int(match.group(1)) >= at_least, stdout
