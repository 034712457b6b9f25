"""The README's "model in one file", run as printed: init, validate, selftest, serve, curl."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LiveServer, free_port, stop, wait_all_workers, wait_ready

pytestmark = pytest.mark.integration

README = Path(__file__).parents[2] / "README.md"


def section() -> str:
    return README.read_text().split("## Your model in one file", 1)[1].split("\n## ", 1)[0]


def readme_commands() -> list[str]:
    """The ``servinglib ...`` lines of the section's command block, without comments."""
    block = re.search(r"```bash\n(servinglib init.*?)```", section(), re.DOTALL)
    assert block is not None, "the README lost its command block"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines()]


def readme_curl() -> tuple[str, str]:
    """The curl command (continuation joined) and the answer the README shows."""
    block = re.search(r"```bash\n(curl .*?)```", section(), re.DOTALL)
    assert block is not None
    command, answer = block.group(1).split("\n# ", 1)
    return command.replace("\\\n", " "), answer.strip()


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        command,
        shell=True,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
        check=False,
    )


def test_the_readme_example_runs_as_printed(tmp_path: Path) -> None:
    commands = readme_commands()
    assert commands[:4] == [
        "servinglib init",
        "servinglib validate",
        "servinglib selftest --junit selftest.xml",
        "servinglib serve --port 8080",
    ]
    for command in commands[:3]:
        result = shell(command, tmp_path)
        assert result.returncode == 0, f"{command}:\n{result.stdout}{result.stderr}"
    # Port 8080 may be taken on a shared machine: the same command on a free port.
    port = free_port()
    serve = commands[3].replace("8080", str(port))
    log_path = tmp_path / "serve.log"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            "exec " + serve,  # the shell becomes the server: stop() signals the server itself
            shell=True,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=env,
        )
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_ready(server.url, process, log_path)
        wait_all_workers(server)
        ready = server.log()
        assert f"ready: 1 models, 1 versions on http://127.0.0.1:{port} (2 workers)" in ready
        assert "  eta  READY 1 (default 1)" in ready
        curl, shown = readme_curl()
        answer = shell(curl.replace("8080", str(port)), tmp_path)
        assert answer.returncode == 0, answer.stderr
        body = json.loads(answer.stdout)
        expected = json.loads(shown.replace('"..."', '"x"'))
        assert body["output"] == expected["output"] == {"eta_s": 312.0}
        assert (body["model_id"], body["version"]) == (expected["model_id"], expected["version"])
        assert set(body) == set(expected)
    finally:
        stop(process)
    assert process.returncode == 0, server.log()
    shutdown = server.log()
    assert "Shutting down: Master" in shutdown
    assert "Error while closing socket" not in shutdown  # a harmless EBADF, not logged


def test_a_taken_port_is_named_before_anything_starts(tmp_path: Path) -> None:
    assert shell("servinglib init", tmp_path).returncode == 0
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = shell(f"servinglib serve --port {port}", tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        f"error: port {port} is taken by another process; pass --port N or set SERVINGLIB_PORT\n"
    )
    assert "Starting gunicorn" not in result.stdout + result.stderr
