"""``POST /infer``: the LyftLearn-style JSON protocol, served without Flask's per-request cost.

It is the hot path of most deployments, so it is a small WSGI layer in front of the Flask
app: it parses, routes, encodes and records the request itself (same service, same error
mapping, same metrics and access log as every other route), and hands every other request
to Flask. That halves the framework time per request; see docs/benchmarks.md.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from servinglib import jsonbytes
from servinglib.config import ServerConfig
from servinglib.errors import (
    InvalidInputError,
    ModelNotReadyError,
    OverloadedError,
    PredictionError,
    ServinglibError,
)
from servinglib.http._context import REQUEST_ID_HEADER, VERSION_HEADER, log_request, request_id_from
from servinglib.http._json import parse_json
from servinglib.http._payload import envoy_timeout_ms, request_priority
from servinglib.http.errors import OUTCOMES, status_for
from servinglib.monitoring.metrics import ServingMetrics
from servinglib.service import InferenceService, Prediction, run_followups

__all__ = ["REASONS", "Answer", "HttpError", "InferCall", "InferEndpoint"]

log = logging.getLogger("servinglib.http")

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

_ALLOWED_KEYS = frozenset({"model_id", "version", "features", "priority"})
REASONS = {
    200: "OK",
    400: "BAD REQUEST",
    404: "NOT FOUND",
    405: "METHOD NOT ALLOWED",
    413: "REQUEST ENTITY TOO LARGE",
    415: "UNSUPPORTED MEDIA TYPE",
    500: "INTERNAL SERVER ERROR",
    503: "SERVICE UNAVAILABLE",
    504: "GATEWAY TIMEOUT",
}


@dataclass
class Answer:
    """The response being built for one /infer request."""

    status: int = 200
    body: bytes = b""
    model: str = "_unknown"
    version: str = ""
    outcome: str = "success"
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class InferCall:
    """A decoded /infer request: what to pass to the service."""

    model: str
    version: str | None
    features: Any
    priority: int | None
    routing_key: str | None
    timeout_ms: float | None


class HttpError(Exception):
    """A request refused before it reaches the service (method, content type, size)."""

    def __init__(
        self,
        status: int,
        message: str,
        outcome: str | None = None,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.outcome = outcome
        self.headers = headers or []


def parse_infer_body(body: Any) -> tuple[str, str | None, Any, int | None]:
    """Check an /infer body; returns model, version, features and priority.

    Raises:
        InvalidInputError: naming the key that is wrong.
    """
    if not isinstance(body, dict):
        raise InvalidInputError(
            'the body must be a JSON object: {"model_id": ..., "features": ...}'
        )
    model = body.get("model_id")
    if not isinstance(model, str):
        raise InvalidInputError("`model_id` is required and must be a string", field="model_id")
    version = body.get("version")
    if version is not None and not isinstance(version, str):
        raise InvalidInputError('`version` must be a string, e.g. "2"', field="version")
    if "features" not in body:
        raise InvalidInputError("`features` is required", field="features")
    unknown = sorted(body.keys() - _ALLOWED_KEYS)
    if unknown:
        raise InvalidInputError(
            f"unknown key(s) {unknown}; allowed: model_id, version, features, priority",
            field=unknown[0],
        )
    return model, version, body["features"], request_priority(body.get("priority"))


class InferEndpoint:
    """WSGI middleware serving ``POST /infer``; everything else goes to ``fallback`` (Flask)."""

    def __init__(
        self,
        fallback: WSGIApp,
        service: InferenceService,
        metrics: ServingMetrics,
        server: ServerConfig,
    ) -> None:
        self._fallback = fallback
        self._service = service
        self._metrics = metrics
        self.max_body = server.max_request_body_bytes
        self._max_depth = server.max_json_depth
        self._deadline_margin_ms = server.deadline_margin_ms
        self._models = frozenset(service.registry.model_names())
        self._too_large = (
            f"request body larger than the limit of {self.max_body} bytes; send a smaller body"
        )

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """Answer /infer here, or pass the request on."""
        if environ.get("PATH_INFO") != "/infer":
            return self._fallback(environ, start_response)
        return self._infer(environ, start_response)

    def _infer(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        started = time.perf_counter()
        request_id = request_id_from(environ)
        in_flight = self._metrics.in_flight_gauge("infer")
        in_flight.inc()
        followups: list[Callable[[], None]] = []
        answer = Answer()
        try:
            self.check_head(environ)
            call = self.parse(environ, self._read_body(environ), answer)
            prediction = self._service.infer(
                call.model,
                call.features,
                call.version,
                request_id=request_id,
                routing_key=call.routing_key,
                timeout_ms=call.timeout_ms,
                priority=call.priority,
                after_response=followups,
            )
            self.succeeded(answer, prediction, request_id)
        except Exception as e:
            self.failed(answer, e)
        finally:
            in_flight.dec()
        status, headers = self.finish(answer, environ, request_id, started)
        start_response(f"{status} {REASONS.get(status, 'ERROR')}", headers)
        return _Body(answer.body, followups)

    # --- the steps, shared with the event-loop front end (servinglib.http.asgi) ----------
    def check_head(self, environ: dict[str, Any]) -> None:
        """Refuse a request by its method, content type or declared length, before the body.

        Raises:
            HttpError: 405, 415, 400 or 413.
        """
        if environ.get("REQUEST_METHOD") != "POST":
            raise HttpError(
                405,
                "The method is not allowed for the requested URL.",
                "invalid_input",
                headers=[("Allow", "POST")],
            )
        mimetype = environ.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower()
        if mimetype and mimetype != "application/json" and not mimetype.endswith("+json"):
            raise HttpError(
                415, f"content type {mimetype!r} is not supported here; send application/json"
            )
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise HttpError(400, "Content-Length must be an integer") from None
        if length > self.max_body:
            raise self.too_large()

    def too_large(self) -> HttpError:
        """The 413 for a body over ``server.max_request_body_bytes``."""
        return HttpError(413, self._too_large)

    def parse(self, environ: dict[str, Any], raw: bytes, answer: Answer) -> InferCall:
        """Decode and check the body; names the model in ``answer`` once it is known.

        Raises:
            InvalidInputError: the body is not a valid /infer request.
        """
        body = parse_json(raw, self._max_depth)
        model, version, features, priority = parse_infer_body(body)
        if model in self._models:
            answer.model = model
        return InferCall(
            model,
            version,
            features,
            priority,
            environ.get(_header_key(self._service, model)),
            envoy_timeout_ms(environ, self._deadline_margin_ms),
        )

    def succeeded(self, answer: Answer, prediction: Prediction, request_id: str) -> None:
        """Encode the model's answer into ``answer``."""
        answer.version = prediction.version
        answer.body = _encode(prediction.model, prediction.version, prediction.output, request_id)

    def failed(self, answer: Answer, error: Exception) -> None:
        """Turn an error into its status, JSON body and metric outcome (never raises)."""
        if isinstance(error, ServinglibError):
            answer.status = status_for(error)
            if isinstance(error, PredictionError | ModelNotReadyError):
                answer.version = error.version
            if isinstance(error, ModelNotReadyError):
                answer.headers.append(("Retry-After", "5"))
            answer.outcome = OUTCOMES.get(answer.status, "server_error")
            if isinstance(error, OverloadedError):
                answer.headers.append(("Retry-After", "1"))
                answer.outcome = "shed"
        elif isinstance(error, HttpError):
            answer.status = error.status
            answer.outcome = error.outcome or OUTCOMES.get(error.status, "server_error")
            answer.headers.extend(error.headers)
        else:
            error_id = uuid.uuid4().hex[:12]
            log.error("unhandled error (error id %s)", error_id, exc_info=error)
            answer.status, answer.outcome = 500, "server_error"
            answer.body = _error_body(
                f"internal server error; see the server log for error id {error_id}"
            )
            return
        answer.body = _error_body(str(error))

    def finish(
        self, answer: Answer, environ: dict[str, Any], request_id: str, started: float
    ) -> tuple[int, list[tuple[str, str]]]:
        """Record the request (metrics, access log); returns the status and the headers."""
        elapsed = time.perf_counter() - started
        self._metrics.observe_request(
            answer.model, answer.version, "infer", answer.outcome, elapsed
        )
        model = "" if answer.model == "_unknown" else answer.model
        method = environ.get("REQUEST_METHOD", "")
        log_request(
            request_id, method, "/infer", answer.status, elapsed, model, answer.version, "infer"
        )
        headers = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(answer.body))),
            (REQUEST_ID_HEADER, request_id),
            *answer.headers,
        ]
        if answer.version:
            headers.append((VERSION_HEADER, answer.version))
        return answer.status, headers

    @property
    def service(self) -> InferenceService:
        """The service answering the requests."""
        return self._service

    @property
    def metrics(self) -> ServingMetrics:
        """The process's metrics owner."""
        return self._metrics

    def _read_body(self, environ: dict[str, Any]) -> bytes:
        length = int(environ.get("CONTENT_LENGTH") or 0)  # checked by check_head
        stream = environ["wsgi.input"]
        if length:
            return bytes(stream.read(length))
        data = bytes(stream.read(self.max_body + 1))  # chunked: read up to the limit
        if len(data) > self.max_body:
            raise self.too_large()
        return data


class _Body:
    """The response body; the server calls ``close`` once it is sent, which runs the followups.

    Shadow copies start only after the client has its answer, so they never compete with
    the request they copy.
    """

    def __init__(self, body: bytes, followups: list[Callable[[], None]]) -> None:
        self._body = body
        self._followups = followups

    def __iter__(self) -> Iterator[bytes]:
        yield self._body

    def close(self) -> None:
        """Run the work deferred until after the response (never raises)."""
        run_followups(self._followups)


def _encode(model: str, version: str, output: Any, request_id: str) -> bytes:
    payload = {"model_id": model, "version": version, "output": output, "request_id": request_id}
    try:
        return jsonbytes.dumps(payload)
    except (TypeError, ValueError) as e:
        error_id = uuid.uuid4().hex[:12]
        log.error(
            "model %r version %r returned an output JSON cannot carry (error id %s)",
            model,
            version,
            error_id,
            exc_info=e,
        )
        raise PredictionError(model, version, error_id) from e


def _error_body(message: str) -> bytes:
    return json.dumps({"error": message}, separators=(",", ":")).encode()  # as jsonify


def _header_key(service: InferenceService, model: str) -> str:
    """The WSGI environ key of the model's routing header (unknown model: a key never set)."""
    try:
        header = service.routing_header(model)
    except ServinglibError:
        return ""
    return "HTTP_" + header.upper().replace("-", "_")
