"""A live ``servinglib serve`` with ``server.grpc_port``, for the gRPC tests."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import LiveServer, free_port, launch

__all__ = ["GrpcServer", "launch_grpc", "wait_until_answered"]


@dataclass
class GrpcServer:
    """The server and its gRPC address."""

    live: LiveServer
    grpc_address: str

    @property
    def url(self) -> str:
        """The HTTP base URL."""
        return self.live.url


def launch_grpc(
    config: Path, log_dir: Path, *extra: str, env: dict[str, str] | None = None
) -> GrpcServer:
    """``servinglib serve`` with ``server.grpc_port`` on a free port, every worker ready."""
    port = free_port()
    live = launch(config, log_dir, *extra, env={"SERVINGLIB_GRPC_PORT": str(port), **(env or {})})
    return GrpcServer(live, f"127.0.0.1:{port}")


def wait_until_answered(server: GrpcServer, timeout_s: float = 30) -> None:
    """Poll grpc.health.v1 until the server says SERVING (fail after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                answer = stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"gRPC not SERVING after {timeout_s} s:\n{server.live.log()}")
            time.sleep(0.1)
