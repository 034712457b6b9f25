"""One inference request and its answer, whatever the transport: the exchange.

Both inference protocols (``/infer`` and Open Inference ``infer``) and both transports (a
WSGI thread, the asyncio worker's event loop) go through the same five steps::

    check the head -> parse the body -> admit and call (the service) -> encode -> record

The transports only read the body and call the service (blocking, or awaited); everything
else is here, so a request is refused, answered, counted and logged the same way on each.
The request body arrives in one place (:meth:`Exchange.parse`) and the response leaves in
one place (:meth:`Exchange.finish`): content codings belong there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servinglib.config.spec import ServerConfig
from servinglib.errors import ServinglibError
from servinglib.http._context import REQUEST_ID_HEADER, VERSION_HEADER, log_request, request_id_from
from servinglib.http._payload import (
    ENVOY_TIMEOUT_HEADER,
    check_transfer_coding,
    envoy_timeout_ms,
)
from servinglib.http._protocols import Encoded, InferProtocol, JsonProtocol, V2Protocol
from servinglib.http.errors import HttpError, describe, too_large
from servinglib.model import PRECOMPUTED_LOOKUP
from servinglib.monitoring.metrics import ServingMetrics
from servinglib.serving import tracing
from servinglib.serving.lanes import Lane
from servinglib.serving.service import InferenceRequest, InferenceService, Prediction
from servinglib.wire.content_coding import (
    ContentCodingError,
    decode_body,
    decode_small_body,
    encode_body,
    response_coding,
)

__all__ = ["Endpoints", "Exchange", "Reply"]

# what an undecodable body is answered with, by what is wrong with it
_CODING_STATUS = {"unsupported": 415, "invalid": 400, "too_large": 413}

Header = Callable[[str], str | None]
PRECOMPUTED_HEADER = "x-servinglib-precomputed"  # hit | miss: how runtime: precomputed answered
Match = tuple[JsonProtocol, str | None, str | None]  # protocol, model and version of a path


@dataclass(slots=True)
class Reply:
    """The answer to send: status, headers, body, and the work to run once it is sent.

    ``shed``: the request was refused for a full queue (the event loop pauses before it
    answers, see :data:`servinglib.http.asgi.SHED_PAUSE_S`). The answer closes the
    connection: a client pool reuses the connection released last, so a kept-alive
    connection to a worker that refuses would get the client's next request at once, and
    the next, while the connections to a worker with room sat idle (measured: 62 % of
    capacity served at 4x load with a LIFO pool, 97 % with a connection per request). A
    new connection goes to whichever worker accepts it first, usually one with room.
    """

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    followups: list[Callable[[], None]] = field(default_factory=list)
    shed: bool = False


class Endpoints:
    """The inference routes of one server: which paths they take, with what limits.

    Example::

        endpoints = Endpoints(service, metrics, ServerConfig())
        exchange = endpoints.open("POST", "/infer", headers.get)
    """

    def __init__(
        self, service: InferenceService, metrics: ServingMetrics, server: ServerConfig
    ) -> None:
        self.service = service
        self.metrics = metrics
        self.max_body = server.max_request_body_bytes
        self.deadline_margin_ms = server.deadline_margin_ms
        self.compress_min_bytes = server.compress_min_bytes
        self._infer = InferProtocol(server)
        self._v2 = V2Protocol(server)

    def match(self, path: str) -> Match | None:
        """The protocol, model and version of an inference path; None for any other path."""
        if path == "/infer":
            return self._infer, None, None
        if path.startswith("/v2/models/") and path.endswith("/infer"):
            parts = path[11:-6].split("/")
            if len(parts) == 1 and parts[0]:
                return self._v2, parts[0], None
            if len(parts) == 3 and parts[1] == "versions" and parts[0] and parts[2]:
                return self._v2, parts[0], parts[2]
        return None

    def open(
        self, method: str, path: str, header: Header, matched: Match | None = None
    ) -> Exchange | None:
        """Start the exchange of an inference request; None when ``path`` is not one.

        ``matched``: what :meth:`match` said of ``path``, when the caller asked already.
        """
        matched = matched or self.match(path)
        if matched is None:
            return None
        return Exchange(self, matched[0], method, path, header, matched[1], matched[2])


class Exchange:
    """One inference request, from its head to the recorded answer."""

    __slots__ = (
        "_body",
        "_content_type",
        "_context",
        "_endpoints",
        "_extra",
        "_in_flight",
        "_label",
        "_lane",
        "_outcome",
        "_path_model",
        "_path_version",
        "_span",
        "_status",
        "header",
        "method",
        "path",
        "protocol",
        "request_id",
        "started",
        "timeout_ms",
        "trace",
        "version",
        "waited_s",
    )

    def __init__(
        self,
        endpoints: Endpoints,
        protocol: JsonProtocol,
        method: str,
        path: str,
        header: Header,
        model: str | None,
        version: str | None,
    ) -> None:
        self.started = time.perf_counter()
        self._endpoints = endpoints
        self.protocol = protocol
        self.method = method
        self.path = path
        self.header = header
        self.request_id = request_id_from(header(REQUEST_ID_HEADER))
        self.timeout_ms = envoy_timeout_ms(
            header(ENVOY_TIMEOUT_HEADER), endpoints.deadline_margin_ms
        )
        self.waited_s = 0.0
        self._path_model = model
        self._path_version = version
        self._lane: Lane | None = None  # the lane of the model the request names, once known
        self._label = "_unknown"
        self._context: Any = None
        self._status = 200
        self._body = b""
        self._content_type = "application/json"
        self._extra: tuple[tuple[str, str], ...] = ()
        self._outcome = "success"
        self.version = ""
        self._in_flight = endpoints.metrics.in_flight_gauge(protocol.name)
        self._in_flight.inc()
        PRECOMPUTED_LOOKUP.set(None)  # this thread or task may have answered one before
        self._span = self.trace = None
        if tracing.ACTIVE is not None:  # the one check the request path makes with it off
            self._span, self.trace = tracing.ACTIVE.start_request(
                header, f"{method} {path}", protocol.name
            )

    def queued_for(self, seconds: float) -> None:
        """The request waited ``seconds`` for a thread before it got here: it counts against
        its deadline and its recorded duration."""
        self.waited_s = seconds
        self.started -= seconds

    def check_head(self) -> None:
        """Refuse a request by its method, path, content type or declared length.

        Raises:
            HttpError: 405, 501 (a transfer coding other than chunked), 415, 400 or 413.
            ModelNotFoundError, VersionNotFoundError: the path names neither.
        """
        if self.method != "POST":
            raise HttpError(
                405, "The method is not allowed for the requested URL.", (("Allow", "POST"),)
            )
        if self._path_model is not None:  # Open Inference: the path names the model
            self._lane = self._endpoints.service.lane(self._path_model)
            self._lane.require_version(self._path_version)
            self._label = self._path_model
        check_transfer_coding(self.header("transfer-encoding"))
        content_type = self.header("content-type") or ""
        mimetype = content_type.split(";", 1)[0].strip().lower()
        self.protocol.check_content_type(mimetype, self.header)
        try:
            length = int(self.header("content-length") or 0)
        except ValueError:
            raise HttpError(400, "Content-Length must be an integer") from None
        if length > self._endpoints.max_body:
            raise too_large(self._endpoints.max_body)

    def lane(self, model: str) -> Lane | None:
        """The lane of ``model``, looked up once per request (None for an unknown model)."""
        if self._lane is None or self._lane.name != model:
            try:
                self._lane = self._endpoints.service.lane(model)
            except ServinglibError:
                return None
        return self._lane

    def routing_key(self, model: str) -> str | None:
        """The value of ``model``'s routing header (None for an unknown model)."""
        lane = self.lane(model)
        return None if lane is None else self.header(lane.routing_header)

    def parse(self, raw: bytes) -> InferenceRequest:
        """Decode the body into the service's request.

        Raises:
            InvalidInputError: the body does not follow the protocol.
        """
        coding = self.header("content-encoding")
        if coding:
            try:
                raw = decode_body(raw, coding, self._endpoints.max_body)
            except ContentCodingError as e:
                raise HttpError(_CODING_STATUS[e.problem], str(e)) from None
        return self._parse_decoded(raw)

    def parse_small(self, raw: bytes, small: int) -> InferenceRequest | None:
        """:meth:`parse`, or None when the body, once inflated, is larger than ``small``.

        An event loop parses a small body itself and hands a larger one to a thread: the
        decision looks at the inflated size, which it learns by inflating at most ``small``
        bytes (plus one step). Same errors as :meth:`parse`.
        """
        if len(raw) > small:
            return None
        coding = self.header("content-encoding")
        if coding:
            try:
                decoded = decode_small_body(raw, coding, self._endpoints.max_body, small)
            except ContentCodingError as e:
                raise HttpError(_CODING_STATUS[e.problem], str(e)) from None
            if decoded is None:
                return None
            raw = decoded
        return self._parse_decoded(raw)

    def _parse_decoded(self, raw: bytes) -> InferenceRequest:
        started = 0 if self.trace is None else time.time_ns()
        request, self._context = self.protocol.parse(
            raw, self._path_model, self._path_version, self
        )
        if request.model in self._endpoints.service.models:
            self._label = request.model
        if self.trace is not None and tracing.ACTIVE is not None:
            tracing.ACTIVE.record("parse", self.trace, started)
        return request

    def answered(self, prediction: Prediction) -> None:
        """Encode the model's answer."""
        self.version = prediction.version
        started = 0 if self.trace is None else time.time_ns()
        encoded: Encoded = self.protocol.encode(prediction, self._context, self.request_id)
        if self.trace is not None and tracing.ACTIVE is not None:
            tracing.ACTIVE.record("encode", self.trace, started)
        self._body, self._content_type, self._extra = (
            encoded.body,
            encoded.content_type,
            encoded.headers,
        )

    def failed(self, error: BaseException) -> None:
        """Answer with the error's status and JSON body (never raises)."""
        described = describe(error)
        self._status, self._body, self._outcome = (
            described.status,
            described.body,
            described.outcome,
        )
        self._content_type = "application/json"
        self._extra = described.headers
        if described.version:
            self.version = described.version

    def finish(self, followups: list[Callable[[], None]]) -> Reply:
        """Record the request (in-flight gauge, metrics, access log); returns the reply."""
        self._in_flight.dec()
        elapsed = time.perf_counter() - self.started
        version = self.version
        model = "" if self._label == "_unknown" else self._label
        trace_id = ""
        if self._span is not None and tracing.ACTIVE is not None:
            trace_id = tracing.ACTIVE.trace_id(self.trace)
            tracing.ACTIVE.finish_request(self._span, self._status, model, version, self.request_id)
        self._endpoints.metrics.observe_request(
            self._label, version, self.protocol.name, self._outcome, elapsed, trace_id
        )
        log_request(
            self.request_id,
            self.method,
            self.path,
            self._status,
            elapsed,
            model,
            version,
            self.protocol.name,
            trace_id,
        )
        body = self._body
        headers = [("Content-Type", self._content_type)]
        if (
            self.protocol.compresses
            and self._status == 200
            and len(body) >= self._endpoints.compress_min_bytes
        ):  # only an answer this large depends on Accept-Encoding, and says so with Vary
            coding = response_coding(self.header("accept-encoding"))
            if coding is not None:
                body = encode_body(body, coding)
                headers.append(("Content-Encoding", coding))
            headers.append(("Vary", "Accept-Encoding"))
        headers += [
            ("Content-Length", str(len(body))),
            (REQUEST_ID_HEADER, self.request_id),
            *self._extra,
        ]
        if version:
            headers.append((VERSION_HEADER, version))
        lookup = PRECOMPUTED_LOOKUP.get()
        if lookup is not None:
            headers.append((PRECOMPUTED_HEADER, lookup))
        shed = self._outcome == "shed"
        if shed:  # the client reconnects: see Reply
            headers.append(("Connection", "close"))
        return Reply(self._status, headers, body, followups, shed)
