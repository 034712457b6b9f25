"""Where the Flask routes meet the transport-neutral request path: ids, bodies, errors.

Everything Flask- or Werkzeug-specific that the routes need lives here, so the exchange,
the protocols, the error mapping and ``wire/`` import neither (an import-linter contract).
"""

from __future__ import annotations

import time
from typing import Any

from flask import Flask, Response, current_app, g, request
from werkzeug.exceptions import HTTPException

from servinglib.http._context import REQUEST_ID_HEADER, VERSION_HEADER, log_request, request_id_from
from servinglib.http.errors import NOT_FOUND_MESSAGE, HttpError, describe, too_large
from servinglib.wire.strict_json import parse_json

__all__ = [
    "from_werkzeug",
    "install_request_context",
    "json_body",
    "register_error_handlers",
    "request_bytes",
]


def install_request_context(app: Flask) -> None:
    """Attach request ids and access logging to ``app``."""

    @app.before_request
    def _start() -> None:
        state = g._get_current_object()  # one proxy lookup, not one per attribute
        state.started = time.perf_counter()
        state.request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))

    @app.after_request
    def _finish(response: Response) -> Response:
        state = g._get_current_object()
        elapsed = time.perf_counter() - getattr(state, "started", time.perf_counter())
        request_id = getattr(state, "request_id", "") or request_id_from(None)
        response.headers[REQUEST_ID_HEADER] = request_id
        version = getattr(state, "version", "")
        if version:
            response.headers[VERSION_HEADER] = version
        environ = request.environ
        log_request(
            request_id,
            environ["REQUEST_METHOD"],
            environ.get("PATH_INFO", ""),
            response.status_code,
            elapsed,
            "",
            version,
            "",
        )
        return response


def json_body() -> Any:
    """The Flask request's body parsed as strict JSON (400 naming the problem otherwise)."""
    return parse_json(request_bytes(), current_app.config["SERVINGLIB_MAX_JSON_DEPTH"])


def request_bytes() -> bytes:
    """The Flask request's body (a body the server cannot read is a 400, not a 500)."""
    try:
        raw = request.get_data(cache=True)
    except HTTPException:  # 413 from the declared length
        raise
    # The server's reader raises its own errors (gunicorn's are not OSError) for a bad
    # chunk size, a missing terminator or a lost client: all the client's doing.
    except Exception as e:
        raise HttpError(400, f"the request body could not be read: {e}") from None
    return raw


def from_werkzeug(error: HTTPException, max_body: int) -> Exception:
    """Werkzeug's own error as the :class:`HttpError` :func:`describe` answers.

    Redirects (merged slashes, a missing trailing slash) would build a Location from the
    client's Host header: every path is either served or a 404. A 5xx stays unexpected.
    """
    code = error.code
    if code is None or code < 400 or code == 404:
        return HttpError(404, NOT_FOUND_MESSAGE)
    if code == 413:
        return too_large(max_body)
    if code < 500:
        kept = tuple(  # e.g. Allow on 405, kept per RFC 9110
            (k, v) for k, v in error.get_headers() if k.lower() != "content-type"
        )
        return HttpError(code, error.description or error.name, kept)
    return error


def register_error_handlers(app: Flask) -> None:
    """Answer every exception of a Flask route through :func:`describe`."""

    @app.errorhandler(Exception)
    def _any(error: Exception) -> Response:
        if isinstance(error, HTTPException):
            error = from_werkzeug(error, app.config["MAX_CONTENT_LENGTH"])
        described = describe(error)
        if described.version:
            g.version = described.version
        response = Response(described.body, described.status, mimetype="application/json")
        for name, value in described.headers:
            response.headers[name] = value
        return response
