"""A real OTLP/HTTP trace receiver on 127.0.0.1: decodes ``ExportTraceServiceRequest``s.

What an OpenTelemetry collector receives on ``/v1/traces`` (protobuf, gzip or not), kept
as flat :class:`Span` records for the tests to query.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class Span:
    """One received span (ids in lower-case hex, times in ns since the epoch)."""

    service: str
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]  # (trace id, span id)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return None if kind is None else getattr(any_value, kind)


class OtlpReceiver:
    """Collects the spans exported to ``endpoint`` (``.../v1/traces``)."""

    def __init__(self) -> None:
        self._spans: list[Span] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self._body()
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._add(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def _body(self) -> bytes:
                if self.headers.get("transfer-encoding", "").lower() != "chunked":
                    return self.rfile.read(int(self.headers.get("content-length") or 0))
                chunks = []  # Envoy's exporter streams its requests
                while size := int(self.rfile.readline().split(b";")[0].strip(), 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                self.rfile.readline()
                return b"".join(chunks)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def _add(self, request: ExportTraceServiceRequest) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            service = str(resource.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    spans.append(
                        Span(
                            service,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            s.name,
                            s.kind,
                            s.start_time_unix_nano,
                            s.end_time_unix_nano,
                            {a.key: _value(a.value) for a in s.attributes},
                            tuple((link.trace_id.hex(), link.span_id.hex()) for link in s.links),
                        )
                    )
        with self._lock:
            self._spans.extend(spans)

    def spans(self, service: str) -> list[Span]:
        """Every span received so far from ``service`` (its ``service.name``)."""
        with self._lock:
            return [s for s in self._spans if s.service == service]

    def services(self) -> set[str]:
        """The ``service.name`` of every exporter heard from."""
        with self._lock:
            return {s.service for s in self._spans}

    def wait_for(
        self, service: str, done: Callable[[list[Span]], bool], timeout_s: float = 30
    ) -> list[Span]:
        """The spans of ``service`` once ``done`` says they are all there (or at the timeout)."""
        deadline = time.monotonic() + timeout_s
        while True:
            spans = self.spans(service)
            if done(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.05)

    def close(self) -> None:
        """Stop listening."""
        self._server.shutdown()
        self._server.server_close()
