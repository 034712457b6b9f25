"""gRPC statuses: the REST mapping of every error, translated; server.grpc_port under either worker."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from servinglib.config.spec import load_config
from servinglib.errors import (
    DeadlineExceededError,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    OverloadedError,
    PredictionError,
    UnsupportedRequestError,
)
from servinglib.grpc_front.status import grpc_status
from servinglib.http.errors import too_large


@pytest.mark.parametrize(
    ("error", "code", "outcome"),
    [
        (InvalidInputError("bad"), grpc.StatusCode.INVALID_ARGUMENT, "invalid_input"),
        (UnsupportedRequestError("no"), grpc.StatusCode.INVALID_ARGUMENT, "invalid_input"),
        (ModelNotFoundError("m", ["a"]), grpc.StatusCode.NOT_FOUND, "not_found"),
        (ModelNotReadyError("m", "2", "LOADING"), grpc.StatusCode.UNAVAILABLE, "not_ready"),
        (OverloadedError("full"), grpc.StatusCode.UNAVAILABLE, "shed"),
        (DeadlineExceededError("late"), grpc.StatusCode.DEADLINE_EXCEEDED, "deadline_exceeded"),
        (too_large(10), grpc.StatusCode.RESOURCE_EXHAUSTED, "too_large"),
        (PredictionError("m", "1", "abc123"), grpc.StatusCode.INTERNAL, "model_error"),
        (RuntimeError("boom"), grpc.StatusCode.INTERNAL, "server_error"),
    ],
)
def test_each_error_gets_its_code_and_outcome(
    error: Exception, code: grpc.StatusCode, outcome: str
) -> None:
    status = grpc_status(error)
    assert (status.code, status.outcome) == (code, outcome)
    assert status.shed is (outcome == "shed")


def test_shed_carries_retry_information() -> None:
    status = grpc_status(OverloadedError("queue full"))
    assert status.message == "queue full"
    assert dict(status.trailers) == {"retry-after": "1", "grpc-retry-pushback-ms": "1000"}


def test_an_unexpected_error_names_its_error_id_not_its_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    status = grpc_status(RuntimeError("secret detail"))
    assert "error id" in status.message
    assert "secret detail" not in status.message
    assert "unhandled error" in caplog.text


def test_grpc_port_is_served_by_either_worker(tmp_path: Path) -> None:
    (tmp_path / "models" / "eta" / "1").mkdir(parents=True)
    path = tmp_path / "servinglib.yaml"
    path.write_text(
        "service: s\nserver: {grpc_port: 9000, worker: gthread}\nmodels:\n"
        "  - {name: eta, class: 'models.eta:EtaModel', repository: models/eta, "
        "default_version: '1'}\n"
    )
    assert load_config(path, environ={}).server.grpc_port == 9000
    assert load_config(path, environ={"SERVINGLIB_WORKER": "asyncio"}).server.grpc_port == 9000
