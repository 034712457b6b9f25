"""Spans recorded once finished, handed straight to the tracer's span processor.

A sampled request's spans all end where :mod:`servinglib.serving.tracing` times them, so
each is built once, finished (the ``ReadableSpan`` the SDK's ``Span.end`` would hand the
processor), without a live span, its lock or the sampler: children of a sampled span are
sampled with it, and the server span's sampling is decided before it starts.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["FinishedSpans", "ServerSpan"]


class FinishedSpans:
    """Spans recorded once finished, straight to the tracer's span processor.

    Only for children of a recording span (so sampled, as their parent), which the
    request path times itself: the same ``ReadableSpan`` the SDK's ``Span.end`` would
    hand the processor, with the tracer's resource and scope, without the live span.
    """

    def __init__(self, tracer: Any) -> None:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, SpanKind

        self._readable = ReadableSpan
        self._context = SpanContext
        self._internal = SpanKind.INTERNAL
        self._server = SpanKind.SERVER
        self._processor = tracer.span_processor
        self._ids = tracer.id_generator
        self._resource = tracer.resource
        info = tracer.instrumentation_info  # the tracer's scope (equal, so grouped with it)
        self._scope = InstrumentationScope(info.name, info.version, info.schema_url)

    def emit(
        self,
        name: str,
        parent: Any,
        started_ns: int,
        ended_ns: int,
        attributes: Mapping[str, Any] | None,
        links: Sequence[Any],
    ) -> Any:
        """Record the span ``name`` under ``parent`` (a span context) and return it."""
        context = self._context(
            parent.trace_id,
            self._ids.generate_span_id(),
            False,
            parent.trace_flags,
            parent.trace_state,
        )
        span = self._readable(
            name,
            context,
            parent,
            self._resource,
            dict(attributes) if attributes else None,
            (),
            tuple(links),
            self._internal,
            start_time=started_ns,
            end_time=ended_ns,
            instrumentation_scope=self._scope,
        )
        self._processor.on_end(span)
        return span

    def server(self, span: ServerSpan, attributes: Mapping[str, Any], status: Any | None) -> None:
        """Record the server span ``span``, ended now, with ``attributes`` added."""
        finished = self._readable(
            span.name,
            span.context,
            span.parent,
            self._resource,
            {"servinglib.protocol": span.protocol, **attributes},
            (),
            (),
            self._server,
            start_time=span.started_ns,
            end_time=time.time_ns(),
            instrumentation_scope=self._scope,
            **({} if status is None else {"status": status}),
        )
        self._processor.on_end(finished)


class ServerSpan:
    """A sampled request's server span until :meth:`Tracing.finish_request` records it
    (finished, straight to the span processor, as the spans below it)."""

    __slots__ = ("context", "name", "parent", "protocol", "started_ns")

    def __init__(
        self, name: str, context: Any, parent: Any, started_ns: int, protocol: str
    ) -> None:
        self.name = name
        self.context = context  # its SpanContext
        self.parent = parent  # the caller's SpanContext, or None for a root
        self.started_ns = started_ns
        self.protocol = protocol

    def get_span_context(self) -> Any:
        return self.context

    def is_recording(self) -> bool:
        return True
