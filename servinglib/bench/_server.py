"""A server started for a run: ``servinglib serve`` on a free loopback port, stopped after."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from servinglib.errors import ServinglibError

__all__ = ["StartedServer", "started_server"]

READY_LINE = "ready: "


class StartedServer:
    """Where the started server answers."""

    def __init__(self, url: str, grpc_address: str | None) -> None:
        self.url = url
        self.grpc_address = grpc_address


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def started_server(
    config: str | Path,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 180.0,
    grpc: bool = False,
) -> Iterator[StartedServer]:
    """Serve ``config`` until the block ends; ``env`` adds ``SERVINGLIB_*`` overrides.

    Raises:
        ServinglibError: the server exited or was not ready within ``timeout_s`` (its log
            ends the message).
    """
    port = _free_port()
    grpc_port = _free_port() if grpc else 0
    overrides = {"SERVINGLIB_PORT": str(port), "SERVINGLIB_HOST": "127.0.0.1"}
    if grpc:
        overrides["SERVINGLIB_GRPC_PORT"] = str(grpc_port)
    full_env = {**os.environ, **overrides, **(env or {})}
    command = [sys.executable, "-m", "servinglib", "serve", "--config", str(config)]
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=full_env)
        try:
            _wait_ready(process, log, timeout_s)
            url = f"http://127.0.0.1:{port}"
            yield StartedServer(url, f"127.0.0.1:{grpc_port}" if grpc else None)
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _read(log: object) -> str:
    log.seek(0)  # type: ignore[attr-defined]
    data: bytes = log.read()  # type: ignore[attr-defined]
    return data.decode(errors="replace")


def _wait_ready(process: subprocess.Popen[bytes], log: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while READY_LINE not in _read(log):
        if "NOT READY" in _read(log):
            raise ServinglibError("the server started NOT READY:\n" + _read(log)[-3000:])
        if process.poll() is not None:
            raise ServinglibError(
                f"the server exited with {process.returncode} before it was ready:\n"
                + _read(log)[-3000:]
            )
        if time.monotonic() > deadline:
            raise ServinglibError(
                f"the server was not ready after {timeout_s:.0f} s:\n" + _read(log)[-3000:]
            )
        time.sleep(0.1)
