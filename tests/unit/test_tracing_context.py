"""Which trace context a request continues, and when a worker turns tracing on."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.trace import get_current_span

from servinglib.serve.tracing_setup import tracing_wanted
from servinglib.serving.finished_spans import ServerSpan
from servinglib.serving.tracing import Tracing

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


def parent_of(headers: dict[str, str]) -> tuple[str, str, bool] | None:
    context = Tracing(TracerProvider().get_tracer("test")).extract(headers.get)
    if context is None:
        return None
    span = get_current_span(context).get_span_context()
    return f"{span.trace_id:032x}", f"{span.span_id:016x}", span.trace_flags.sampled


@pytest.mark.parametrize(
    ("headers", "parent"),
    [
        ({"traceparent": f"00-{TRACE}-{SPAN}-01"}, (TRACE, SPAN, True)),
        ({"traceparent": f"00-{TRACE}-{SPAN}-00"}, (TRACE, SPAN, False)),
        ({"x-b3-traceid": TRACE, "x-b3-spanid": SPAN, "x-b3-sampled": "0"}, (TRACE, SPAN, False)),
        ({"x-b3-traceid": TRACE[16:], "x-b3-spanid": SPAN}, ("0" * 16 + TRACE[16:], SPAN, True)),
        ({"b3": f"{TRACE}-{SPAN}-1"}, (TRACE, SPAN, True)),
        ({"b3": "0"}, None),
        ({}, None),
    ],
)
def test_the_parent_comes_from_w3c_or_b3_headers(
    headers: dict[str, str], parent: tuple[str, str, bool] | None
) -> None:
    assert parent_of(headers) == parent


def test_a_malformed_traceparent_is_no_parent() -> None:
    assert parent_of({"traceparent": "00-nothex-00f067aa0ba902b7-01"}) == (
        "0" * 32,
        "0" * 16,
        False,
    )


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
    ],
)
def test_tracing_is_on_only_with_an_otlp_endpoint(environ: dict[str, str], wanted: bool) -> None:
    assert tracing_wanted(environ) is wanted


def _server_span(headers: dict[str, str], ratio: float) -> ServerSpan | None:
    provider = TracerProvider(sampler=ParentBased(ALWAYS_ON))  # as servinglib configures it
    span, context = Tracing(provider.get_tracer("test"), ratio).start_request(
        headers.get, "POST /infer", "infer"
    )
    assert (span is None) == (context is None)
    if span is not None:
        assert isinstance(span, ServerSpan)
        assert get_current_span(context).get_span_context() == span.context
    return span


def test_parent_based_sampling_follows_the_caller_and_the_ratio_decides_roots() -> None:
    sampled = {"traceparent": f"00-{TRACE}-{SPAN}-01", "tracestate": "vendor=1"}
    child = _server_span(sampled, 0.0)  # the caller sampled it: traced whatever the ratio
    assert child is not None
    assert child.parent is not None
    assert f"{child.context.trace_id:032x}" == TRACE
    assert f"{child.parent.span_id:016x}" == SPAN
    assert child.context.span_id not in (0, child.parent.span_id)
    assert child.context.trace_flags.sampled
    assert child.context.trace_state.to_header() == "vendor=1"
    assert _server_span({"traceparent": f"00-{TRACE}-{SPAN}-00"}, 1.0) is None  # caller: no
    assert _server_span({}, 0.0) is None
    root = _server_span({}, 1.0)
    assert root is not None
    assert root.parent is None
    assert root.context.trace_id != 0
    assert root.context.trace_flags.sampled
    malformed = {"traceparent": "00-nothex-00f067aa0ba902b7-01"}
    assert _server_span(malformed, 0.0) is None  # a root like any other: the ratio decides
    again = _server_span(malformed, 1.0)
    assert again is not None
    assert again.parent is None


def test_headers_longer_than_opentelemetry_reads_are_left_out_without_a_log_line() -> None:
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    sdk = logging.getLogger("opentelemetry")
    sdk.addHandler(handler)
    try:
        _read_long_headers()
    finally:
        sdk.removeHandler(handler)
    assert records == []


def _read_long_headers() -> None:
    long_parent = f"00-{TRACE}-{SPAN}-01-" + "x" * 600
    assert parent_of({"traceparent": long_parent}) is None
    state = ",".join(f"k{i}=v" for i in range(200))  # 1,289 characters
    child = _server_span({"traceparent": f"00-{TRACE}-{SPAN}-01", "tracestate": state}, 0.0)
    assert child is not None
    assert f"{child.context.trace_id:032x}" == TRACE  # the parent is kept, its state is not
    assert child.context.trace_state.to_header() == ""
