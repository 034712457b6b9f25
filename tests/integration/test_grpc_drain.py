"""gRPC deadlines and graceful drain, against a real server whose model sleeps on demand,
under both worker classes (asyncio: the gRPC server on the worker's loop; gthread: on a
thread of its own)."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as triton
import tritonclient.grpc.aio as triton_aio
from tritonclient.utils import InferenceServerException

from tests.conftest import stop
from tests.integration._tools_grpc import launch_grpc
from tests.integration.test_reliability import prediction_log_service, reliability_service

pytestmark = pytest.mark.integration


def _sleep(seconds: float) -> list[triton.InferInput]:
    tensor = triton.InferInput("sleep_s", [], "FP64")  # a scalar, as the model reads it
    tensor.set_data_from_numpy(np.array(seconds))
    return [tensor]


@pytest.mark.parametrize("worker", ["asyncio", "gthread"])
def test_grpc_timeout_and_envoys_budget_become_the_deadline(tmp_path: Path, worker: str) -> None:
    config = reliability_service(tmp_path)
    # A margin of 1 s: the server's own answer reaches the client long before the client
    # gives up, however loaded the machine (the default is 50 ms).
    config.write_text(
        config.read_text().replace("server:\n", "server:\n  deadline_margin_ms: 1000\n")
    )
    server = launch_grpc(config, tmp_path, "--workers", "1", "--worker", worker)
    try:
        with triton.InferenceServerClient(server.grpc_address) as client:
            with pytest.raises(InferenceServerException) as late:
                client.infer("steady", _sleep(4.0), client_timeout=3.0)
            assert str(late.value.status()) == "StatusCode.DEADLINE_EXCEEDED"
            # the server's own answer (its message), the margin before the client gives up
            assert "did not answer within the request deadline" in late.value.message()
            with pytest.raises(InferenceServerException) as envoy:
                client.infer(
                    "steady",
                    _sleep(4.0),
                    client_timeout=30,
                    headers={"x-envoy-expected-rq-timeout-ms": "2000"},
                )
            assert str(envoy.value.status()) == "StatusCode.DEADLINE_EXCEEDED"
            assert "did not answer within the request deadline" in envoy.value.message()
            assert client.infer("steady", _sleep(0.01), client_timeout=5).as_numpy("ok")
    finally:
        stop(server.live.process)


@pytest.mark.parametrize(
    ("signum", "worker"), [("SIGTERM", "asyncio"), ("SIGINT", "asyncio"), ("SIGTERM", "gthread")]
)
def test_a_signal_drains_grpc_calls_and_loses_no_row(
    tmp_path: Path, signum: str, worker: str
) -> None:
    config, url = prediction_log_service(tmp_path)
    server = launch_grpc(config, tmp_path, "--workers", "2", "--worker", worker)
    answered: list[str] = []
    refused: list[str] = []
    failures: Counter[str] = Counter()
    enough = asyncio.Event

    async def load() -> float:
        reached = enough()

        async def client(first: int) -> None:
            async with triton_aio.InferenceServerClient(server.grpc_address) as aio:
                for i in range(first, first + 300):
                    try:
                        result = await aio.infer(
                            "steady",
                            _sleep(0.01),
                            headers={"x-request-id": f"req-{i}"},
                            client_timeout=30,
                        )
                    except InferenceServerException as e:
                        failures[str(e.status())] += 1
                        refused.append(f"req-{i}")
                        return  # the server is gone for this client
                    assert result.as_numpy("ok") is not None
                    answered.append(f"req-{i}")
                    if len(answered) >= 100:
                        reached.set()

        clients = [asyncio.ensure_future(client(1000 * c)) for c in range(8)]
        await asyncio.wait_for(reached.wait(), 60)
        stopped_at = time.monotonic()
        server.live.process.send_signal(getattr(signal, signum))
        await asyncio.gather(*clients)
        return stopped_at

    try:
        stopped_at = asyncio.run(load())
        server.live.process.wait(timeout=60)
    finally:
        stop(server.live.process)
    took = time.monotonic() - stopped_at
    print(
        f"figures: {worker} {signum} exit {took:.1f} s, {len(answered)} answered, {dict(failures)}"
    )
    assert took < 10, f"exit took {took:.1f} s (graceful_timeout_s is 10)"
    assert server.live.process.returncode == 0, server.live.log()
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        logged = {row[0] for row in db.execute("SELECT request_id FROM predictions")}
    missing = set(answered) - logged
    assert not missing, f"{len(missing)} answered calls have no prediction-log row"
    # A call that fails was never taken: refused (UNAVAILABLE: connection refused, GOAWAY),
    # or cancelled by grpc core as it reached a worker that had stopped taking calls
    # (CANCELLED): neither ran, was logged nor has a prediction-log row.
    assert set(failures) <= {"StatusCode.UNAVAILABLE", "StatusCode.CANCELLED"}, failures
    log = server.live.log()
    assert not [r for r in refused if f'"request_id": "{r}"' in log or r in logged]
    served = log.count('"path": "/inference.GRPCInferenceService/ModelInfer"')
    assert served == len(answered), f"the server answered {served}, clients got {len(answered)}"
