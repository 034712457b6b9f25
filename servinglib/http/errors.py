"""The one place that maps servinglib errors to HTTP statuses; every error body is JSON."""

from __future__ import annotations

import logging
import uuid

from flask import Flask, Response, g, jsonify
from werkzeug.exceptions import HTTPException

from servinglib.errors import (
    DeadlineExceededError,
    InvalidInputError,
    ModelLoadError,
    ModelNotFoundError,
    ModelNotReadyError,
    OverloadedError,
    PredictionError,
    ServinglibError,
    VersionNotFoundError,
)

__all__ = ["OUTCOMES", "error_response", "register_error_handlers", "status_for"]

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
    500: "model_error",
    503: "not_ready",
    504: "deadline_exceeded",
}


def status_for(error: ServinglibError) -> int:
    """HTTP status for a servinglib error."""
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return 500


def error_response(message: str, status: int) -> Response:
    """A JSON ``{"error": message}`` response (the Open Inference error shape)."""
    response = jsonify(error=message)
    response.status_code = status
    return response


def register_error_handlers(app: Flask) -> None:
    """Turn every exception into a JSON error: never an HTML page, never a traceback."""

    @app.errorhandler(ServinglibError)
    def _servinglib_error(error: ServinglibError) -> Response:
        version = getattr(error, "version", None)
        if isinstance(version, str) and isinstance(error, PredictionError | ModelNotReadyError):
            g.version = version  # the version that was asked to answer, for metrics and logs
        response = error_response(str(error), status_for(error))
        if isinstance(error, ModelNotReadyError):
            response.headers["Retry-After"] = "5"
        if isinstance(error, OverloadedError):
            response.headers["Retry-After"] = "1"
            g.outcome = "shed"
        return response

    @app.errorhandler(HTTPException)
    def _http_error(error: HTTPException) -> Response:
        status = error.code or 500
        message = error.description or error.name
        if status == 413:
            limit = app.config.get("MAX_CONTENT_LENGTH")
            message = f"request body larger than the limit of {limit} bytes; send a smaller body"
        response = error_response(message, status)
        for name, value in error.get_headers():
            if name.lower() != "content-type":  # e.g. Allow on 405, kept per RFC 9110
                response.headers[name] = value
        return response

    @app.errorhandler(Exception)
    def _unexpected(error: Exception) -> Response:
        error_id = uuid.uuid4().hex[:12]
        g.unexpected_error = True
        log.error("unhandled error (error id %s)", error_id, exc_info=error)
        return error_response(
            f"internal server error; see the server log for error id {error_id}", 500
        )
