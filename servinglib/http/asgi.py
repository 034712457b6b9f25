"""The event-loop front end: every inference request on an asyncio loop, the rest in Flask.

Under load, a thread per request costs more than the HTTP work itself: each request is
handed from gunicorn's poller to a thread, from that thread to the batcher, and back, and
every hand-off wakes a thread that must take the interpreter lock. Here one event loop per
worker (uvloop, httptools' C parser) reads every connection; ``/infer`` and Open Inference
``infer`` requests (JSON and binary) are parsed on the loop by the exchange
(:mod:`servinglib.http._exchange`), queued for their model's batch, and answered when the
batch's future resolves: one thread switch per *batch*, not two per request.

The other routes (probes, metadata, metrics, OpenAPI) are the same Flask app as under
``worker: gthread``, called on a pool of ``server.threads`` threads.
"""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from servinglib.http._exchange import Endpoints, Match, Reply
from servinglib.http.errors import HttpError, describe, too_large
from servinglib.serving.service import run_followups

__all__ = ["LARGE_BODY_BYTES", "SHED_PAUSE_S", "AsgiFrontEnd"]

# A request refused because its model's queue is full is answered (503) after this pause.
# Answered at once, a client that retries without backing off comes straight back to be
# refused again: one event loop then refuses 8,500 requests/s, and the CPU it burns slows
# the model the accepted requests wait for (their p99 went from 1.3x to 2.2x of the
# unloaded p99 in the overload benchmark). The pause holds no thread and no queue slot.
SHED_PAUSE_S = 0.002

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


# Inference bodies larger than this (once inflated: a 7.6 KiB gzip body can hold 7.5 MiB)
# are inflated and parsed on a thread instead of the event loop: an 8 MiB JSON body takes
# hundreds of milliseconds to parse, during which the loop would answer nobody else; below
# it, the thread hop costs more than it saves. The loop inflates at most this much (plus
# one 64 KiB step) to learn which side of it a compressed body falls.
LARGE_BODY_BYTES = 256 * 1024


class AsgiFrontEnd:
    """ASGI app: the inference endpoints on the loop, ``fallback`` (Flask) on threads.

    Example::

        front = AsgiFrontEnd(Endpoints(service, metrics, server), flask_app, threads=8)
        # uvicorn / gunicorn's asyncio worker calls front(scope, receive, send)
    """

    def __init__(
        self,
        endpoints: Endpoints,
        fallback: WSGIApp,
        threads: int,
        close_when: Callable[[], bool] | None = None,
    ) -> None:
        """``close_when``: asked before each answer; True adds ``Connection: close`` (the
        worker holds more connections than its share)."""
        self._endpoints = endpoints
        self._fallback = fallback
        self._max_body = endpoints.max_body
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="servinglib-wsgi")
        # One thread: a parse holds the interpreter lock, and two at once would starve the
        # loop twice as often (8 clients sending 7.5 MiB bodies: small requests' p99 282 ms
        # with two, 189 ms with one, on two busy cores).
        self._parsers = ThreadPoolExecutor(max_workers=1, thread_name_prefix="servinglib-parse")
        self._close_when = close_when

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope."""
        kind = scope["type"]
        if kind == "http":
            matched = self._endpoints.match(scope["path"])
            if matched is not None:
                await self._infer(scope, receive, send, matched)
            else:
                await self._wsgi(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(receive, send)

    async def _infer(self, scope: Scope, receive: Receive, send: Send, matched: Match) -> None:
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = headers[name] + "," + value if name in headers else value
        exchange = self._endpoints.open(scope["method"], scope["path"], headers.get, matched)
        assert exchange is not None  # matched by the caller
        followups: list[Callable[[], None]] = []
        try:
            exchange.check_head()
            body = await _read_body(receive, self._max_body)
            request = exchange.parse_small(body, LARGE_BODY_BYTES)
            if request is None:  # parsing (or inflating) would stall every other connection
                loop = asyncio.get_running_loop()
                request = await loop.run_in_executor(self._parsers, exchange.parse, body)
            prediction = await self._endpoints.service.infer_async(request, followups)
            exchange.answered(prediction)
        except Exception as e:
            exchange.failed(e)
        reply = exchange.finish(followups)
        if reply.shed:
            await asyncio.sleep(SHED_PAUSE_S)
        await self._respond(send, reply)
        run_followups(reply.followups)  # shadow copies: only once the answer is sent

    async def _respond(self, send: Send, reply: Reply) -> None:
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers]
        if not reply.shed and self._close_when is not None and self._close_when():
            headers.append((b"connection", b"close"))  # the client reconnects, maybe elsewhere
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": reply.body})

    async def _wsgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every other route: the Flask app, on the thread pool."""
        environ = _environ(scope)
        declared = environ.get("CONTENT_LENGTH")
        if declared and declared.isdigit() and int(declared) > self._max_body:
            body = b""  # Flask answers 413 from the declared length without reading
        else:
            try:
                body = await _read_body(receive, self._max_body)
            except HttpError as e:
                described = describe(e)
                length = str(len(described.body))
                head = [("Content-Type", "application/json"), ("Content-Length", length)]
                await self._respond(send, Reply(described.status, head, described.body))
                return
        environ["wsgi.input"] = io.BytesIO(body)
        environ.setdefault("CONTENT_LENGTH", str(len(body)) if body else "")
        loop = asyncio.get_running_loop()
        status, headers, chunks, result = await loop.run_in_executor(
            self._pool, _call_wsgi, self._fallback, environ
        )
        if self._close_when is not None and self._close_when():
            headers.append((b"connection", b"close"))
        try:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": b"".join(chunks)})
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()


def _environ(scope: Scope) -> dict[str, Any]:
    """A PEP 3333 environ for Flask (the body is added once read)."""
    server = scope.get("server") or ("127.0.0.1", 80)
    client = scope.get("client") or ("", 0)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": scope.get("root_path", "").encode().decode("latin-1"),
        "PATH_INFO": scope["path"].encode().decode("latin-1"),
        "QUERY_STRING": scope["query_string"].decode("latin-1"),
        "SERVER_NAME": server[0],
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{scope['http_version']}",
        "REMOTE_ADDR": client[0],
        "REMOTE_PORT": str(client[1]),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1").upper().replace("-", "_")
        value = raw_value.decode("latin-1")
        if name not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            name = "HTTP_" + name
        if name in environ:
            value = environ[name] + "," + value
        environ[name] = value
    return environ


def _call_wsgi(
    app: WSGIApp, environ: dict[str, Any]
) -> tuple[int, list[tuple[bytes, bytes]], list[bytes], Iterable[bytes]]:
    """Run the WSGI app and collect its whole answer (on a pool thread)."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started[:] = [status, headers]
        return lambda data: None  # the legacy write() callable; Flask never uses it

    result = app(environ, start_response)
    chunks = list(result)
    status_line, headers = started
    encoded = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    return int(status_line.split(" ", 1)[0]), encoded, chunks, result


async def _read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body, refusing more than ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise HttpError(400, "the client disconnected before sending the whole body")
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            parts.append(chunk)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


async def _lifespan(receive: Receive, send: Send) -> None:
    """Models load before the app exists (in the worker, after fork): nothing to start."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
