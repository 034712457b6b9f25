"""Request tracing with OpenTelemetry: the spans a request leaves on its way through.

:data:`ACTIVE` is None unless a worker enabled tracing
(:func:`servinglib.serve.tracing_setup.start_tracing`, when the ``tracing`` extra is
installed and an OTLP endpoint is configured): the request path looks at it once per
step and makes no OpenTelemetry call while it is None.

Only sampled requests carry a trace context, so everything past the server span asks one
question, ``trace is None``, and makes no OpenTelemetry call for the others. The context
travels explicitly, as an OpenTelemetry ``Context`` holding the request's server span: in
:class:`~servinglib.serving.service.InferenceRequest` ``.trace``, in a batcher's queue
item, and in :class:`~servinglib.model.CallScope` ``.trace`` for the steps of a composed
model. Nothing depends on which thread or event loop carries the request.

A request not sampled costs three header lookups and one random draw (or, with a
``traceparent``, its parse and the sampling decision) and nothing more: no span, no
context, no exemplar. With servinglib's parent-based sampling the decision is made here
(a root by the ratio, a child as its caller decided), and a sampled request's spans,
its server span included, go to the span processor as finished ``ReadableSpan`` objects
(:mod:`~servinglib.serving.finished_spans`): no live span, no sampler call, no lock, no
attribute checks. That matters most when sampling is rare: a traced request then runs
its span code cold, and every call it makes costs several times what it costs hot. With
any other sampler the server span starts through the tracer, whose sampler decides.
Steps of composed models and shadow copies start through the tracer (their spans stay
open across calls).

Spans, under the server span of each request: ``parse`` (decoding and protocol checks),
``admit`` (routing and input validation), ``queue`` (waiting for a batch), ``predict``
(the model call; in a batch, linked to the batch's span), ``encode``; one ``predict_batch``
span per batch, linked to the span of every request in it; ``step <name>`` per step of a
composed model (its own spans below it); ``shadow <version>`` per shadow copy, after the
answer, linked to the request's span (and its child, so that it is sampled with it).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from servinglib.serving.finished_spans import FinishedSpans, ServerSpan

__all__ = ["ACTIVE", "Tracing", "trace_id_of", "trace_ids_of"]

Header = Callable[[str], str | None]

# The worker's tracing, or None (tracing off: the request path makes no OpenTelemetry call).
ACTIVE: Tracing | None = None

_B3_SINGLE = "b3"
_B3_HEADERS = ("x-b3-traceid", "x-b3-spanid", "x-b3-sampled")
_MAX_HEADER = 512  # the longest traceparent or tracestate OpenTelemetry reads


class Tracing:
    """Makes the spans of the request path from one tracer.

    ``root_ratio``: the share of requests without a trace context (or B3/W3C headers) that
    start a trace, decided here before any OpenTelemetry call (the tracer's sampler then
    samples every root it is asked for); None leaves every decision to the tracer's sampler.

    Example::

        tracing = Tracing(provider.get_tracer("servinglib"), root_ratio=0.01)
        span, context = tracing.start_request(headers.get, "POST /infer", "infer")
    """

    def __init__(self, tracer: Any, root_ratio: float | None = None) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._tracer = tracer
        self._root_ratio = root_ratio
        self._draw = random.random  # the root decision: not by trace id, none exists yet
        self._trace = trace
        self._w3c = TraceContextTextMapPropagator()
        self._server = trace.SpanKind.SERVER
        self._internal = trace.SpanKind.INTERNAL
        self._error = trace.Status(trace.StatusCode.ERROR)
        self._finished = FinishedSpans(tracer)
        self._ids = tracer.id_generator
        self._span_context = trace.SpanContext
        self._non_recording = trace.NonRecordingSpan
        flags = trace.TraceFlags
        self._flags = flags(flags.SAMPLED)
        self._random_flags = flags(flags.SAMPLED | flags.RANDOM_TRACE_ID)
        self._root_flags = self._random_flags if self._ids.is_trace_id_random() else self._flags

    # --- request spans -------------------------------------------------------------------
    def start_request(self, header: Header, name: str, protocol: str) -> tuple[Any, Any]:
        """The server span of a request (child of the caller's ``traceparent``, or of its
        B3 headers) and the context holding it; ``(None, None)`` when it is not sampled.

        With servinglib's parent-based sampling (``root_ratio`` set) the decision is made
        here and the server span is a :class:`ServerSpan`, ended by :meth:`finish_request`
        as a finished span: no live span, no call into the tracer. Another sampler decides
        through the tracer, and the server span is the tracer's.
        """
        carrier = None
        # three lookups for a request without trace headers (the common case), no call
        if header("traceparent") or header(_B3_SINGLE) or header(_B3_HEADERS[0]):
            carrier = _carrier(header)
        ratio = self._root_ratio
        if ratio is None:
            return self._from_tracer(name, carrier, protocol)
        parent = None
        if carrier is not None:
            remote = self._trace.get_current_span(self._w3c.extract(carrier)).get_span_context()
            if remote.is_valid:
                if not remote.trace_flags.sampled:
                    return None, None  # the caller did not sample it
                parent = remote
        if parent is None:
            if ratio <= 0.0 or self._draw() >= ratio:
                return None, None  # no OpenTelemetry call for a request not traced
            trace_id, flags, state = self._ids.generate_trace_id(), self._root_flags, None
        else:
            trace_id, state = parent.trace_id, parent.trace_state
            flags = self._random_flags if parent.trace_flags.random_trace_id else self._flags
        context = self._span_context(trace_id, self._ids.generate_span_id(), False, flags, state)
        span = ServerSpan(name, context, parent, time.time_ns(), protocol)
        return span, self._trace.set_span_in_context(self._non_recording(context))

    def _from_tracer(
        self, name: str, carrier: dict[str, str] | None, protocol: str
    ) -> tuple[Any, Any]:
        """The server span through the tracer, whose sampler decides."""
        parent = None if carrier is None else self._w3c.extract(carrier)
        span = self._tracer.start_span(
            name, parent, self._server, {"servinglib.protocol": protocol}
        )
        if not span.is_recording():
            return None, None
        return span, self._trace.set_span_in_context(span)

    def extract(self, header: Header) -> Any:
        """The caller's trace context from W3C ``traceparent``/``tracestate``, else B3."""
        carrier = _carrier(header)
        return None if carrier is None else self._w3c.extract(carrier)

    def finish_request(
        self, span: Any, status: int, model: str, version: str, request_id: str
    ) -> None:
        """End a server span with what the request came to."""
        attributes = {
            "http.response.status_code": status,
            "servinglib.model": model,
            "servinglib.version": version,
            "servinglib.request_id": request_id,
        }
        if isinstance(span, ServerSpan):
            self._finished.server(span, attributes, self._error if status >= 500 else None)
            return
        span.set_attributes(attributes)
        if status >= 500:
            span.set_status(self._error)
        span.end()

    def start(self, name: str, context: Any, attributes: Mapping[str, Any] | None = None) -> Any:
        """A span under ``context`` (ended by the caller), or None when it is not sampled."""
        if context is None:
            return None
        span = self._tracer.start_span(name, context, self._internal, attributes)
        return span if span.is_recording() else None

    def in_context(self, span: Any, context: Any) -> Any:
        """The context of ``span`` (``context`` itself when ``span`` is None)."""
        return context if span is None else self._trace.set_span_in_context(span)

    def record(
        self,
        name: str,
        context: Any,
        started_ns: int,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Any] = (),
        ended_ns: int | None = None,
    ) -> Any:
        """A finished span under ``context`` from ``started_ns`` (``time.time_ns()``) to now."""
        if context is None:
            return None
        parent = self._trace.get_current_span(context).get_span_context()
        ended = time.time_ns() if ended_ns is None else ended_ns
        return self._finished.emit(name, parent, started_ns, ended, attributes, links)

    def around_batch(
        self, run: Callable[[], None], contexts: Sequence[Any], queued_s: Sequence[float]
    ) -> None:
        """``run()`` one batch, then :meth:`record_batch` when any request in it is traced."""
        if all(context is None for context in contexts):
            run()
            return
        started_ns = time.time_ns()
        run()
        self.record_batch(contexts, queued_s, started_ns, len(contexts))

    def record_batch(
        self, contexts: Sequence[Any], queued_s: Sequence[float], started_ns: int, size: int
    ) -> None:
        """The spans of one finished batch: ``queue`` and ``predict`` under each sampled
        request, and one ``predict_batch`` span (under the first) linked to all of them
        (none for a batch of one: its ``predict`` span says it all).

        ``queued_s``: how long each request waited before the batch started.
        """
        from opentelemetry.trace import Link

        sampled = [(c, q) for c, q in zip(contexts, queued_s, strict=True) if c is not None]
        if not sampled:
            return
        ended_ns = time.time_ns()
        if size == 1:  # one request: its predict span is the batch
            context, waited = sampled[0]
            self.record("queue", context, started_ns - int(waited * 1e9), ended_ns=started_ns)
            self.record("predict", context, started_ns, {"servinglib.batch_size": 1})
            return
        parents = [self._trace.get_current_span(c).get_span_context() for c, _ in sampled]
        batch = self._finished.emit(
            "predict_batch",
            parents[0],
            started_ns,
            ended_ns,
            {"servinglib.batch_size": size},
            [Link(parent) for parent in parents],
        )
        to_batch = [Link(batch.get_span_context())]
        for context, waited in sampled:
            self.record("queue", context, started_ns - int(waited * 1e9), ended_ns=started_ns)
            self.record(
                "predict",
                context,
                started_ns,
                {"servinglib.batch_size": size},
                to_batch,
                ended_ns=ended_ns,
            )

    def linked(self, name: str, context: Any, attributes: Mapping[str, Any]) -> Any:
        """A span that follows from the span in ``context`` (shadow copies, run after the
        answer): its child, in its trace, and linked to it; None when it is not sampled.

        A trace of its own would go through the sampler as a new root, and a parent-based
        sampler would drop the copies of every sampled request.
        """
        if context is None:
            return None
        from opentelemetry.trace import Link

        link = Link(self._trace.get_current_span(context).get_span_context())
        return self._tracer.start_span(name, context, self._internal, attributes, [link])

    def trace_id(self, context: Any) -> str:
        """The trace id (32 hex digits) of the span in ``context``; "" for none."""
        ids = self.ids(context)
        return "" if ids is None else ids[0]

    def ids(self, context: Any) -> tuple[str, str] | None:
        """The trace id (32 hex digits) and span id (16) of the span in ``context``."""
        span_context = self._trace.get_current_span(context).get_span_context()
        if not span_context.is_valid:
            return None
        return f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}"


def trace_id_of(context: Any) -> str:
    """The trace id of a request's trace ``context`` ("" when tracing is off or none)."""
    tracing = ACTIVE
    if tracing is None or context is None:
        return ""
    return tracing.trace_id(context)


def trace_ids_of(context: Any, span: Any = None) -> tuple[str | None, str | None]:
    """The trace and span ids of ``span`` (when given) or of the span in the trace
    ``context``; ``(None, None)`` when the request is not traced."""
    tracing = ACTIVE
    if tracing is None or context is None:
        return None, None
    ids = tracing.ids(tracing.in_context(span, context))
    return (None, None) if ids is None else ids


def _carrier(header: Header) -> dict[str, str] | None:
    """The W3C headers of a request (B3 ones translated), or None without any.

    Headers longer than OpenTelemetry reads (512 characters) are left out here, so that a
    caller cannot make every request log OpenTelemetry's warning about them.
    """
    traceparent = header("traceparent") or _b3_traceparent(header)
    if not traceparent or len(traceparent) > _MAX_HEADER:
        return None
    tracestate = header("tracestate")
    if tracestate and len(tracestate) <= _MAX_HEADER:
        return {"traceparent": traceparent, "tracestate": tracestate}
    return {"traceparent": traceparent}


def _b3_traceparent(header: Header) -> str | None:
    """A W3C ``traceparent`` from B3 headers (single ``b3`` or ``x-b3-*``), or None."""
    single = header(_B3_SINGLE)
    if single:
        parts = single.split("-")
        if len(parts) < 2:
            return None
        trace_id, span_id = parts[0], parts[1]
        sampled = parts[2] if len(parts) > 2 else "1"
    else:
        trace_id, span_id, sampled = (header(name) or "" for name in _B3_HEADERS)
        sampled = sampled or "1"
    if not trace_id or not span_id:
        return None
    flags = "01" if sampled in ("1", "d", "true") else "00"
    return f"00-{trace_id.lower().rjust(32, '0')}-{span_id.lower()}-{flags}"
