"""servinglib.serving.service: admission, version choice, errors and follow-ups, in process.

The service is driven directly (no transport) over the fixture service's real registry:
scorer v1/v2 READY, v3 failed to load, v4 failed its self-test; echo; whoami.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from servinglib.errors import (
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    PredictionError,
    VersionNotFoundError,
)
from servinglib.serving.assembly import Worker, load_worker
from servinglib.serving.service import InferenceRequest, InferenceService, run_followups
from tests.conftest import SERVICE_CONFIG


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    loaded = load_worker(SERVICE_CONFIG)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def service(worker: Worker) -> InferenceService:
    return worker.service


def scorer(x: Any, **kwargs: Any) -> InferenceRequest:
    return InferenceRequest("scorer", {"x": x}, **kwargs)


def test_the_default_version_answers_and_an_explicit_one_is_honoured(
    service: InferenceService,
) -> None:
    answer = service.infer(scorer(2.0))
    assert (answer.model, answer.version, answer.output) == ("scorer", "2", {"score": 6.0})
    assert answer.latency_s >= 0
    assert service.infer(scorer(2.0, version="1")).output == {"score": 4.0}


def test_sync_and_async_answers_are_the_same(service: InferenceService) -> None:
    requests = [scorer(float(x)) for x in range(8)]
    blocking = [service.infer(r).output for r in requests]

    async def all_on_the_loop() -> list[Any]:
        answers = await asyncio.gather(*(service.infer_async(r) for r in requests))
        return [a.output for a in answers]

    assert asyncio.run(all_on_the_loop()) == blocking


@pytest.mark.parametrize(
    ("request_", "error", "message"),
    [
        (InferenceRequest("nope", {}), ModelNotFoundError, "unknown model 'nope'"),
        (scorer(1.0, version="9"), VersionNotFoundError, "'9'"),
        (scorer(1.0, version="3"), ModelNotReadyError, "is FAILED (load() raised RuntimeError"),
        (scorer(1.0, version="4"), ModelNotReadyError, "self-test 'wrong expectation' failed"),
        (scorer("two"), InvalidInputError, "'two' is not of type 'number'"),
        (InferenceRequest("scorer", {"y": 1}), InvalidInputError, "'x' is a required property"),
    ],
)
def test_routing_and_input_failures_name_the_cause(
    service: InferenceService, request_: InferenceRequest, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        service.infer(request_)
    assert message in str(caught.value)

    async def on_the_loop() -> None:
        await service.infer_async(request_)

    with pytest.raises(error):
        asyncio.run(on_the_loop())


def test_a_model_failure_is_a_prediction_error_without_its_details(
    service: InferenceService,
) -> None:
    request = InferenceRequest("scorer", {"x": 1.0, "explode": True})
    with pytest.raises(PredictionError) as caught:
        service.infer(request)
    assert "secret internal detail" not in str(caught.value)
    assert caught.value.error_id in str(caught.value)


def test_a_caller_budget_shortens_the_deadline_and_a_missing_one_keeps_it(
    service: InferenceService,
) -> None:
    lane = service.lane("scorer")
    now = lane.deadline(None) - lane.config.deadline_ms / 1000
    assert lane.deadline(5.0) - now == pytest.approx(0.005, abs=0.05)
    assert lane.deadline(0.0) - now == pytest.approx(lane.config.deadline_ms / 1000, abs=0.05)
    # Envoy's zero or missing budget never refuses a request on arrival.
    assert service.infer(scorer(1.0, timeout_ms=0.0)).output == {"score": 3.0}


def test_an_unknown_lane_is_not_found_and_known_lanes_are_listed(
    service: InferenceService,
) -> None:
    assert service.models == frozenset({"scorer", "echo", "whoami"})
    assert service.lane("scorer").routing_header
    with pytest.raises(ModelNotFoundError) as caught:
        service.lane("missing")
    assert "scorer" in str(caught.value)


def test_tensors_reach_the_model_as_arrays(service: InferenceService) -> None:
    tensors = {"a": np.array([[1, 2], [3, 4]], dtype=np.int32)}
    answer = service.infer(InferenceRequest("echo", tensors, tensors=True))
    assert answer.version == "1"
    assert np.array_equal(np.asarray(answer.output["a"]), tensors["a"])


def test_follow_ups_run_only_when_the_caller_runs_them(service: InferenceService) -> None:
    later: list[Callable[[], None]] = []
    service.infer(scorer(1.0), later)
    ran = threading.Event()
    later.append(ran.set)
    assert not ran.is_set()
    run_followups(later)
    assert ran.wait(10)


def test_readiness_follows_the_default_versions(service: InferenceService) -> None:
    assert service.is_ready()
    assert service.wedged() == []
    versions = {(model, version) for model, version, _ in service.executors()}
    assert {("scorer", "1"), ("scorer", "2"), ("echo", "1")} <= versions
