"""KServe's SDK gRPC client (``InferenceGRPCClient``), unchanged, against servinglib."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SERVICE_CONFIG, stop
from tests.integration._tools import kserve_python
from tests.integration._tools_grpc import GrpcServer, launch_grpc

pytestmark = pytest.mark.integration

CLIENTS = Path(__file__).parent / "clients"


@pytest.fixture(scope="module")
def grpc_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcServer]:
    server = launch_grpc(SERVICE_CONFIG, tmp_path_factory.mktemp("kserve"), "--workers", "2")
    yield server
    stop(server.live.process)


def test_kserve_sdk_grpc_client(grpc_server: GrpcServer) -> None:
    python = kserve_python()
    result = subprocess.run(
        [str(python), str(CLIENTS / "kserve_grpc.py"), grpc_server.grpc_address],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["is_server_live"] is True
    assert report["is_server_ready"] is True
    assert report["is_model_ready(echo)"] is True
    for raw in (False, True):
        assert report[f"infer(raw={raw})"] == {
            "id": f"kserve-{raw}",
            "x": [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]],
            "w": ["alpha", "beta"],
        }
    assert report["infer(ghost)"]["code"] == "NOT_FOUND"
    assert "unknown model 'ghost'" in report["infer(ghost)"]["message"]
