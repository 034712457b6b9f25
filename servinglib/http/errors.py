"""The one place that maps errors to HTTP answers; every error body is JSON.

:func:`describe` turns any exception into a status, a JSON body, extra headers and the
metric outcome. The inference exchange (WSGI and event loop alike), the gRPC front end
and the Flask routes all use it, so a given error reads the same on every transport. It
knows no web framework: :mod:`servinglib.http.flask_glue` turns Werkzeug's own errors
into :class:`HttpError` first.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

import orjson

from servinglib.errors import (
    DeadlineExceededError,
    InvalidInputError,
    ModelLoadError,
    ModelNotFoundError,
    ModelNotReadyError,
    NonFiniteOutputError,
    OverloadedError,
    PredictionError,
    ServinglibError,
    VersionNotFoundError,
)

__all__ = [
    "OUTCOMES",
    "Described",
    "HttpError",
    "describe",
    "error_body",
    "too_large",
]

log = logging.getLogger("servinglib.http")

_STATUS: tuple[tuple[type[ServinglibError], int], ...] = (
    (InvalidInputError, 400),
    (ModelNotFoundError, 404),
    (VersionNotFoundError, 404),
    (ModelNotReadyError, 503),
    (OverloadedError, 503),
    (DeadlineExceededError, 504),
    (ModelLoadError, 503),
    (PredictionError, 500),
)

# Request outcome label (metrics) by status code.
OUTCOMES = {
    200: "success",
    400: "invalid_input",
    404: "not_found",
    405: "invalid_input",
    413: "too_large",
    415: "invalid_input",
    431: "invalid_input",
    500: "model_error",
    501: "invalid_input",
    503: "not_ready",
    504: "deadline_exceeded",
}


class HttpError(Exception):
    """A request refused before it reaches the service (method, content type, size)."""

    def __init__(
        self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers


@dataclass(frozen=True)
class Described:
    """How an error is answered: status, JSON body, extra headers, metric outcome.

    ``version`` is the version that was asked to answer, when the error names one.
    """

    status: int
    body: bytes
    outcome: str
    headers: tuple[tuple[str, str], ...] = field(default=())
    version: str = ""


def error_body(message: str) -> bytes:
    """A JSON ``{"error": message}`` body (the Open Inference error shape)."""
    return orjson.dumps({"error": message})


def too_large(limit: int) -> HttpError:
    """The 413 for a body over ``server.max_request_body_bytes``."""
    return HttpError(
        413, f"request body larger than the limit of {limit} bytes; send a smaller body"
    )


def describe(error: BaseException) -> Described:
    """The answer to ``error``; an unexpected one is logged under an error id (never raises)."""
    if isinstance(error, ServinglibError):
        status = _status_for(error)
        headers: tuple[tuple[str, str], ...] = ()
        outcome = OUTCOMES.get(status, "server_error")
        version = ""
        if isinstance(error, PredictionError | ModelNotReadyError):
            version = error.version
        if isinstance(error, ModelNotReadyError):
            headers = (("Retry-After", "5"),)
        elif isinstance(error, OverloadedError):
            headers, outcome = (("Retry-After", "1"),), "shed"
        elif isinstance(error, NonFiniteOutputError):
            outcome = "nonfinite_output"  # the operator's signal: a model answering NaN
        return Described(status, error_body(str(error)), outcome, headers, version)
    if isinstance(error, HttpError):
        outcome = OUTCOMES.get(
            error.status, "invalid_input" if error.status < 500 else "server_error"
        )
        return Described(error.status, error_body(str(error)), outcome, error.headers)
    error_id = uuid.uuid4().hex[:12]
    log.error("unhandled error (error id %s)", error_id, exc_info=error)
    message = f"internal server error; see the server log for error id {error_id}"
    return Described(500, error_body(message), "server_error")


NOT_FOUND_MESSAGE = (
    "no such path; predictions are POST /infer (features as JSON) or POST "
    "/v2/models/{model}/infer (Open Inference); GET /models lists the models, /livez and "
    "/readyz are the probes, /metrics the metrics; /openapi.json describes every path"
)


def _status_for(error: ServinglibError) -> int:
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return 500
