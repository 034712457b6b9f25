"""gRPC under ``--worker gthread --workers 2``: each worker serves it on a thread of its own,
sharing the port; a full queue is refused like under the asyncio worker.

Deadlines and the SIGTERM drain under gthread are in ``test_grpc_drain.py`` (parametrized
over both worker classes).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as triton
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.conftest import stop
from tests.integration._tools_grpc import launch_grpc
from tests.integration.test_reliability import reliability_service

pytestmark = pytest.mark.integration

# One call at a time, one more queued: the third concurrent call is shed.
NARROW = """  - name: narrow
    class: models/misbehaving/model.py:Misbehaving
    repository: models/misbehaving
    default_version: "1"
    batching: {max_batch_size: 1, max_queue_delay_us: 0, max_queue_size: 1}
"""


def _flag(name: str) -> triton.InferInput:
    tensor = triton.InferInput(name, [], "BOOL")  # a scalar, as the model reads it
    tensor.set_data_from_numpy(np.array(True))
    return tensor


def _sleep_request(seconds: float) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="narrow")
    request.inputs.add(name="sleep_s", datatype="FP64", shape=[])
    request.raw_input_contents.append(np.array(seconds).tobytes())
    return request


def test_gthread_workers_serve_grpc_on_one_port_and_shed_with_retry_info(
    tmp_path: Path,
) -> None:
    config = reliability_service(tmp_path, NARROW)
    server = launch_grpc(config, tmp_path, "--workers", "2", "--worker", "gthread")
    try:
        with grpc.insecure_channel(server.grpc_address) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService"),
                timeout=10,
            )
            assert health.status == health_pb2.HealthCheckResponse.SERVING
        # Each channel is one connection, handed by the kernel to one worker: both answer.
        pids: set[int] = set()
        for _ in range(40):
            with triton.InferenceServerClient(server.grpc_address) as client:
                assert client.is_server_ready()
                assert client.is_model_ready("steady")
                result = client.infer("steady", [_flag("pid")], client_timeout=10)
                assert bool(result.as_numpy("ok"))
                pids.add(int(result.as_numpy("pid").ravel()[0]))
            if len(pids) == 2:
                break
        assert len(pids) == 2, f"only worker {pids} answered 40 connections"

        with grpc.insecure_channel(server.grpc_address) as channel:
            infer = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer
            calls = [infer.future(_sleep_request(0.5), timeout=10) for _ in range(6)]
            outcomes: Counter[str] = Counter()
            for call in calls:
                if call.exception() is None:
                    outcomes["OK"] += 1
                    continue
                outcomes[call.code().name] += 1
                assert call.code() == grpc.StatusCode.UNAVAILABLE, call.details()
                assert "max_queue_size" in call.details() or "deadline" in call.details()
                trailers = dict(call.trailing_metadata() or ())
                assert trailers["retry-after"] == "1"
                assert trailers["grpc-retry-pushback-ms"] == "1000"
        print(f"figures: 6 concurrent calls to a queue of 1: {dict(outcomes)}")
        assert outcomes["OK"] >= 1, outcomes
        assert outcomes["UNAVAILABLE"] >= 1, outcomes
        metrics = requests.get(f"{server.url}/metrics", timeout=10).text
        shed = [line for line in metrics.splitlines() if 'outcome="shed"' in line]
        assert any('protocol="grpc"' in line and 'model="narrow"' in line for line in shed)
    finally:
        stop(server.live.process)
