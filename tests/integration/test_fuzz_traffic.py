"""Hypothesis-generated hostile requests against live servers of both worker classes.

At least 1,000 requests per protocol (/infer, Open Inference JSON, Open Inference binary)
per worker class. Every answer is JSON; none is a 5xx except the deliberate ones (503 not
ready, 504 deadline, and the 500 of a model that answers NaN or Infinity); no worker dies.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import LiveServer, launch, stop, worker_pids
from tests.hostile_bodies import (
    Hostile,
    binary_requests,
    index_requests,
    infer_requests,
    v2_requests,
)
from tests.integration.test_openapi_fuzzing import fuzz_service

pytestmark = pytest.mark.integration

EXAMPLES = 1000
PROTOCOLS = {
    "infer": infer_requests(),
    "v2": v2_requests(),
    "binary": binary_requests(),
    "index": index_requests(),
}


@pytest.fixture(scope="module", params=["gthread", "asyncio"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """The fixture service (scorer declares an FP64 input) with 2 workers of one class."""
    directory = tmp_path_factory.mktemp(request.param)
    live = launch(fuzz_service(directory), directory, "--workers", "2", "--worker", request.param)
    yield live
    stop(live.process)


def deliberate(status: int, error: str) -> bool:
    """The 5xx answers servinglib gives on purpose."""
    return status in (503, 504) or (status == 500 and "answered NaN or Infinity" in error)


def send(session: requests.Session, url: str, request: Hostile) -> tuple[int, str]:
    response = session.post(
        url + request.path, data=request.body, headers=request.headers, timeout=30
    )
    assert response.headers["Content-Type"].startswith(
        ("application/json", "application/octet-stream")
    )
    if response.status_code == 200:
        return 200, ""
    error = response.json()["error"]
    assert isinstance(error, str)
    assert error
    return response.status_code, error


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_hostile_requests_get_4xx_json_and_kill_no_worker(
    server: LiveServer, protocol: str
) -> None:
    pids = worker_pids(server)  # launch() returns once every worker is ready
    assert len(pids) == 2
    statuses: Counter[int] = Counter()
    unexpected: list[tuple[int, str, Hostile]] = []

    with requests.Session() as session:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(st.data())
        def exchange(data: st.DataObject) -> None:
            request = data.draw(PROTOCOLS[protocol])
            status, error = send(session, server.url, request)
            statuses[status] += 1
            if status >= 500 and not deliberate(status, error):
                unexpected.append((status, error, request))

        exchange()
    assert sum(statuses.values()) >= EXAMPLES
    assert not unexpected, unexpected[:5]
    assert set(statuses) - {200} <= set(range(400, 500)) | {500, 503, 504}, statuses
    assert worker_pids(server) == pids
    assert requests.get(f"{server.url}/readyz", timeout=5).status_code == 200
