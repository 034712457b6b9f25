"""The WSGI front end: inference requests through the exchange, every other route in Flask.

``/infer`` and Open Inference ``infer`` are the hot paths of most deployments, so they skip
Flask's per-request cost: this thin adapter reads the body and calls the service on the
WSGI thread; :mod:`servinglib.http._exchange` does the rest. See docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from servinglib.http._exchange import Endpoints
from servinglib.http.errors import HttpError, too_large
from servinglib.serving.service import run_followups

__all__ = ["QUEUED_S", "WsgiFrontEnd"]

# environ key a server may set: seconds the request waited for a thread before the app saw
# it (servinglib's gthread worker does); it counts against the request's deadline.
QUEUED_S = "servinglib.queued_s"

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

REASONS = {
    200: "OK",
    400: "BAD REQUEST",
    404: "NOT FOUND",
    405: "METHOD NOT ALLOWED",
    413: "REQUEST ENTITY TOO LARGE",
    415: "UNSUPPORTED MEDIA TYPE",
    500: "INTERNAL SERVER ERROR",
    501: "NOT IMPLEMENTED",
    503: "SERVICE UNAVAILABLE",
    504: "GATEWAY TIMEOUT",
}


class WsgiFrontEnd:
    """WSGI middleware answering the inference routes; everything else goes to ``fallback``."""

    def __init__(self, endpoints: Endpoints, fallback: WSGIApp) -> None:
        self._endpoints = endpoints
        self._fallback = fallback

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """Answer an inference request here, or pass the request on."""
        exchange = self._endpoints.open(
            environ.get("REQUEST_METHOD", ""),
            environ.get("PATH_INFO", ""),
            _EnvironHeaders(environ).get,
        )
        if exchange is None:
            return self._fallback(environ, start_response)
        waited = environ.get(QUEUED_S)
        if waited:
            exchange.queued_for(waited)
        followups: list[Callable[[], None]] = []
        try:
            exchange.check_head()
            request = exchange.parse(_read_body(environ, self._endpoints.max_body))
            exchange.answered(self._endpoints.service.infer(request, followups))
        except Exception as e:
            exchange.failed(e)
        reply = exchange.finish(followups)
        start_response(f"{reply.status} {REASONS.get(reply.status, 'ERROR')}", reply.headers)
        return _Body(reply.body, reply.followups)


class _EnvironHeaders:
    """Request headers by lower-case name, read from a WSGI environ."""

    __slots__ = ("_environ",)

    def __init__(self, environ: dict[str, Any]) -> None:
        self._environ = environ

    def get(self, name: str) -> str | None:
        key = name.upper().replace("-", "_")
        if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            key = "HTTP_" + key
        value: str | None = self._environ.get(key)
        return value


def _read_body(environ: dict[str, Any], limit: int) -> bytes:
    length = int(environ.get("CONTENT_LENGTH") or 0)  # checked by check_head
    stream = environ["wsgi.input"]
    if length:
        return bytes(stream.read(length))
    try:
        data = bytes(stream.read(limit + 1))  # chunked: read up to the limit
    # The server's reader raises its own errors (gunicorn's are not OSError) for a bad
    # chunk size, a missing terminator or a lost client: all the client's doing.
    except Exception as e:
        raise HttpError(400, f"the chunked request body could not be read: {e}") from None
    if len(data) > limit:
        raise too_large(limit)
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
