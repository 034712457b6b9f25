"""What tracing does per request, counted rather than timed: an unsampled request runs no
OpenTelemetry code at all, a sampled one starts no span through the tracer (servinglib's
parent-based sampling decides) and hands every span to the span processor finished."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

from servinglib.http.app import create_asgi_app
from servinglib.http.asgi import AsgiFrontEnd
from servinglib.serving import tracing
from servinglib.serving.assembly import Worker, load_worker
from tests.conftest import SERVICE_CONFIG
from tests.unit.test_asgi_front_end import call, infer_body

REQUESTS = 20


class CountingTracer:
    """A real SDK tracer that counts the spans started through it."""

    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer
        self.started = 0

    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        self.started += 1
        return self._tracer.start_span(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tracer, name)


@pytest.fixture(scope="module")
def front() -> Iterator[AsgiFrontEnd]:
    worker: Worker = load_worker(SERVICE_CONFIG)
    yield create_asgi_app(worker.service, worker.metrics, worker.config.server)
    worker.close()


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    tracing.ACTIVE = None


def traced(exporter: InMemorySpanExporter, ratio: float) -> CountingTracer:
    provider = TracerProvider(sampler=ParentBased(ALWAYS_ON))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = CountingTracer(provider.get_tracer("servinglib"))
    tracing.ACTIVE = tracing.Tracing(tracer, ratio)
    return tracer


def opentelemetry_calls(front: AsgiFrontEnd, requests: int) -> int:
    """Python calls into the ``opentelemetry`` packages while ``front`` answers."""
    calls = 0

    def profile(frame: FrameType, event: str, _: Any) -> None:
        nonlocal calls
        if event == "call" and "/opentelemetry/" in frame.f_code.co_filename:
            calls += 1

    sys.setprofile(profile)
    try:
        for _ in range(requests):
            assert call(front, "POST", "/infer", infer_body(2.0)).status == 200
    finally:
        sys.setprofile(None)
    return calls


def test_an_unsampled_request_runs_no_opentelemetry_code(
    front: AsgiFrontEnd, exported: InMemorySpanExporter
) -> None:
    tracer = traced(exported, 0.0)
    assert opentelemetry_calls(front, REQUESTS) == 0
    assert (tracer.started, exported.get_finished_spans()) == (0, ())


def test_a_sampled_request_starts_no_span_through_the_tracer(
    front: AsgiFrontEnd, exported: InMemorySpanExporter
) -> None:
    tracer = traced(exported, 1.0)
    assert opentelemetry_calls(front, REQUESTS) > 0
    assert tracer.started == 0
    expected = sorted(["parse", "admit", "queue", "predict", "encode"] * REQUESTS)
    # the batcher thread records a batch's spans once the batch is answered, which may be
    # after the client has its answer: wait for them (a missing span still fails below)
    deadline = time.monotonic() + 30
    while True:
        spans = exported.get_finished_spans()
        servers = {s.context.span_id: s for s in spans if s.name == "POST /infer"}
        children = sorted(s.name for s in spans if s.parent and s.parent.span_id in servers)
        if len(children) >= len(expected) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert len(servers) == REQUESTS
    assert children == expected
    for child in spans:
        if child.name == "POST /infer":
            continue
        assert child.parent is not None
        assert child.context is not None
        server = servers[child.parent.span_id]
        assert server.context is not None
        assert child.context.trace_id == server.context.trace_id
        assert child.context.trace_flags.sampled
        assert child.resource == server.resource
        assert child.instrumentation_scope == server.instrumentation_scope
        assert (server.start_time or 0) <= (child.start_time or 0) <= (child.end_time or 0)
