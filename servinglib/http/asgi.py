"""The event-loop front end: ``POST /infer`` on an asyncio loop, every other route in Flask.

Under load, a thread per request costs more than the HTTP work itself: each request is
handed from gunicorn's poller to a thread, from that thread to the batcher, and back, and
every hand-off wakes a thread that must take the interpreter lock. Here one event loop per
worker (uvloop, httptools' C parser) reads every connection; ``/infer`` requests are parsed
on the loop, queued for their model's batch, and answered when the batch's future
resolves: one thread switch per *batch*, not two per request.

The other routes (Open Inference, probes, metrics, OpenAPI) are the same Flask app as
under ``worker: gthread``, called on a pool of ``server.threads`` threads.

Run it with ``server.worker: asyncio`` (the default), or
``gunicorn -k servinglib.serve.asgi_worker.AsyncioWorker servinglib.http.wsgi:app``.
"""

from __future__ import annotations

import asyncio
import io
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from servinglib.http._context import request_id_from
from servinglib.http.infer import Answer, HttpError, InferEndpoint
from servinglib.service import run_followups

__all__ = ["SHED_PAUSE_S", "AsgiFrontEnd", "ServinglibApp"]

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


class ServinglibApp(Protocol):
    """What the front end needs of the Flask app (kept abstract: flask stays in the app)."""

    extensions: dict[str, Any]
    config: Any

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        """The WSGI entry point."""


class AsgiFrontEnd:
    """ASGI app around a servinglib Flask app (from :func:`servinglib.http.app.create_app`).

    Example::

        front = AsgiFrontEnd(create_app_from_config("servinglib.yaml"))
        # uvicorn / gunicorn's asyncio worker calls front(scope, receive, send)
    """

    def __init__(
        self, app: ServinglibApp, threads: int, close_when: Callable[[], bool] | None = None
    ) -> None:
        """``close_when``: asked before each answer; True adds ``Connection: close`` (the
        worker holds more connections than its share)."""
        endpoint = app.extensions.get("servinglib.infer_endpoint")
        if not isinstance(endpoint, InferEndpoint):
            raise TypeError(
                "the asyncio worker serves servinglib apps only (servinglib.http.wsgi:app, "
                "or an app from servinglib.http.app.create_app); use worker: gthread for "
                "other WSGI apps"
            )
        self._app = app
        self._endpoint = endpoint
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="servinglib-wsgi")
        self._close_when = close_when

    @property
    def extensions(self) -> dict[str, Any]:
        """The Flask app's extensions (gunicorn's ``worker_exit`` hook finds shutdown here)."""
        return self._app.extensions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope."""
        kind = scope["type"]
        if kind == "http":
            if scope["path"] == "/infer":
                await self._infer(scope, receive, send)
            else:
                await self._wsgi(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(receive, send)

    async def _infer(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        endpoint = self._endpoint
        environ = environ_from(scope)
        request_id = request_id_from(environ)
        in_flight = endpoint.metrics.in_flight_gauge("infer")
        in_flight.inc()
        followups: list[Callable[[], None]] = []
        answer = Answer()
        try:
            endpoint.check_head(environ)
            raw = await _read_body(receive, endpoint.max_body, endpoint.too_large)
            call = endpoint.parse(environ, raw, answer)
            prediction = await endpoint.service.infer_async(
                call.model,
                call.features,
                call.version,
                request_id=request_id,
                routing_key=call.routing_key,
                timeout_ms=call.timeout_ms,
                priority=call.priority,
                after_response=followups,
            )
            endpoint.succeeded(answer, prediction, request_id)
        except Exception as e:
            endpoint.failed(answer, e)
        finally:
            in_flight.dec()
        if answer.outcome == "shed":
            await asyncio.sleep(SHED_PAUSE_S)
        status, headers = endpoint.finish(answer, environ, request_id, started)
        if self._close_when is not None and self._close_when():
            headers.append(("Connection", "close"))  # the client reconnects, maybe elsewhere
        await _respond(send, status, headers, answer.body)
        run_followups(followups)  # shadow copies: only once the answer is sent

    async def _wsgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every route but /infer: the Flask app, on the thread pool."""
        limit = self._app.config["MAX_CONTENT_LENGTH"]
        environ = environ_from(scope)
        declared = environ.get("CONTENT_LENGTH")
        if declared and declared.isdigit() and int(declared) > limit:
            body = b""  # Flask answers 413 from the declared length without reading
        else:
            try:
                body = await _read_body(receive, limit, self._endpoint.too_large)
            except HttpError as e:
                answer = Answer()
                self._endpoint.failed(answer, e)
                await _respond(send, e.status, _json_headers(answer.body), answer.body)
                return
        _complete_environ(environ, scope, body)
        loop = asyncio.get_running_loop()
        status, headers, chunks, result = await loop.run_in_executor(
            self._pool, _call_wsgi, self._app, environ
        )
        if self._close_when is not None and self._close_when():
            headers.append((b"connection", b"close"))
        try:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": b"".join(chunks)})
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()  # Flask's call_on_close work (shadow copies of v2 requests)


def environ_from(scope: Scope) -> dict[str, Any]:
    """The WSGI-style view of a request's method and headers (``HTTP_*`` keys)."""
    environ: dict[str, Any] = {"REQUEST_METHOD": scope["method"], "PATH_INFO": scope["path"]}
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1").upper().replace("-", "_")
        value = raw_value.decode("latin-1")
        if name not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            name = "HTTP_" + name
        if name in environ:
            value = environ[name] + "," + value
        environ[name] = value
    return environ


def _complete_environ(environ: dict[str, Any], scope: Scope, body: bytes) -> None:
    """The rest of a PEP 3333 environ, for Flask."""
    server = scope.get("server") or ("127.0.0.1", 80)
    client = scope.get("client") or ("", 0)
    environ.update(
        {
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
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
    )
    environ.setdefault("CONTENT_LENGTH", str(len(body)) if body else "")


def _call_wsgi(
    app: ServinglibApp, environ: dict[str, Any]
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


async def _read_body(receive: Receive, limit: int, too_large: Callable[[], HttpError]) -> bytes:
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
                raise too_large()
            parts.append(chunk)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


async def _respond(send: Send, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
    encoded = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": encoded})
    await send({"type": "http.response.body", "body": body})


def _json_headers(body: bytes) -> list[tuple[str, str]]:
    return [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]


async def _lifespan(receive: Receive, send: Send) -> None:
    """Models load before the app exists (in the worker, after fork): nothing to start."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
