"""The asyncio gunicorn worker: uvicorn's event loop serving servinglib's ASGI front end.

gunicorn still runs the show (pre-fork, hooks, worker restarts, graceful shutdown); each
worker runs one uvloop event loop with httptools' C HTTP parser instead of a thread per
connection. After fork the worker builds its :class:`~servinglib.serving.assembly.Worker` from
``SERVINGLIB_CONFIG`` and serves it with :func:`servinglib.http.app.create_asgi_app`
(gunicorn's app argument is not imported).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, ClassVar, cast

import orjson
from gunicorn.arbiter import Arbiter
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import Server
from uvicorn_worker import UvicornWorker

from servinglib.http.app import create_asgi_app
from servinglib.serve.app import worker_from_environment
from servinglib.serve.balance import ConnectionBalance
from servinglib.serve.body_timeout import BodyTimeout, TimedBody
from servinglib.serve.one_write import OneWriteTransport
from servinglib.serve.ready import report_worker_ready
from servinglib.serve.settings import connection_cap
from servinglib.serving.assembly import Worker

__all__ = ["AsyncioWorker", "ConnectionLimits", "limited_protocol"]


class AsyncioWorker(UvicornWorker):  # type: ignore[misc]
    """gunicorn worker: one event loop, inference on the loop, the rest in Flask threads."""

    CONFIG_KWARGS: ClassVar[dict[str, Any]] = {
        "loop": "uvloop",
        "http": "httptools",
        "lifespan": "off",  # models load when the app is imported, in the worker
        "access_log": False,  # servinglib writes its own JSON request log
        # One Server header policy for both worker classes: gthread's gunicorn always sends
        # "Server: gunicorn" (no version), so the event loop sends the same, never uvicorn's.
        "server_header": False,
        "headers": [("server", "gunicorn")],
    }

    balance: ClassVar[ConnectionBalance | None] = None  # shared by the workers of a server
    grpc_balance: ClassVar[ConnectionBalance | None] = None  # the same, for gRPC connections
    serving: Worker | None = None  # this process's worker, once built
    grpc: Any = None  # the gRPC front end (servinglib.grpc_front), when server.grpc_port is set

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # runs in the master, before the fork
        if AsyncioWorker.balance is None:
            AsyncioWorker.balance = ConnectionBalance(slots=max(8, 2 * self.cfg.workers))
            AsyncioWorker.grpc_balance = ConnectionBalance(slots=max(8, 2 * self.cfg.workers))

    def load_wsgi(self) -> None:
        """Load every model (the worker), then build the event-loop app around it."""
        serving = worker_from_environment()
        self.serving = serving
        balance = AsyncioWorker.balance
        assert balance is not None
        balance.join()  # only now: a worker still loading its models must not attract clients
        server = serving.config.server
        self.config.http = limited_protocol(
            self.cfg.limit_request_field_size,
            self.cfg.limit_request_fields,
            balance,
            ConnectionLimits(
                server.header_timeout_s,
                connection_cap(server.max_connections),
                BodyTimeout(server.body_timeout_s, server.body_min_bytes_per_s),
            ),
        )
        self.wsgi = create_asgi_app(
            serving.service,
            serving.metrics,
            serving.config.server,
            close_when=balance.crowded,
            liveness=serving.is_live,
        )
        if server.grpc_port:  # imported only here, after fork: grpc must not start in the master
            from servinglib.grpc_front.server import GrpcFrontEnd

            live, shared = serving.is_live, cast(ConnectionBalance, AsyncioWorker.grpc_balance)
            front = GrpcFrontEnd(serving.service, serving.metrics, server, liveness=live)
            self.grpc = front.balanced_by(shared.joined())

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """SIGQUIT (the master sends it on SIGINT): drain like SIGTERM.

        uvicorn-worker routes SIGQUIT here, where gunicorn only clears ``alive``, which the
        event loop never reads: the worker kept serving until the master killed it.
        """
        super().handle_exit(sig, frame)
        os.kill(os.getpid(), signal.SIGTERM)

    async def _serve(self) -> None:
        # uvicorn re-raises SIGTERM/SIGINT once its graceful shutdown is done; with the
        # default handler that would kill the worker before gunicorn's worker_exit hook
        # flushes the prediction log and shadow copies. From here on they are no-ops.
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, _already_stopping)
        try:
            # uvicorn-worker's _serve, with a server that empties its accept queue first.
            self.config.app = self.wsgi
            grace_s = max(1.0, self.cfg.graceful_timeout - 2.0)  # then the worker's exit hooks
            server = _DrainingServer(self.config, self.sockets, self.grpc, grace_s)
            self._install_sigquit_handler()
            if self.grpc is not None:
                await self.grpc.start()  # then ready: its gRPC port listens too
                report_worker_ready(self.serving.service.catalog if self.serving else None)
            await server.serve(sockets=self.sockets)
            if not server.started:
                sys.exit(Arbiter.WORKER_BOOT_ERROR)
        finally:
            for balance in filter(None, (AsyncioWorker.balance, AsyncioWorker.grpc_balance)):
                balance.leave()


SHUTDOWN_GRACE_S = 0.1  # how long an idle connection is still read once the worker stops
# Then the worker half-closes it (FIN) and discards what arrives until the client closes or
# this long: a request written before the client saw the FIN reads a clean end of stream,
# not the reset an outright close answers it with (what a busy client writing late got).
LINGER_S = 2.0


class _DrainingServer(Server):
    """uvicorn's server, which takes in the connections queued on its sockets before it stops.

    A connection the kernel completed but no worker accepted yet waits in the listening
    socket's queue; when the last worker closes that socket, the kernel resets it (and its
    client, which may have written its request, reads a reset). So at shutdown the worker
    accepts every queued connection, stops listening, and treats those like its others.
    """

    def __init__(
        self, config: Config, listeners: Sequence[Any], grpc: Any = None, grace_s: float = 25.0
    ) -> None:
        super().__init__(config=config)
        self._listeners = listeners
        self._grpc = grpc
        self._grace_s = grace_s

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Accept what is queued, stop listening, then uvicorn's graceful shutdown (and the
        gRPC server's, at the same time: its calls in flight are answered, then GOAWAY)."""
        grpc = [] if self._grpc is None else [self._grpc.stop(self._grace_s)]
        await asyncio.gather(*grpc, self._shutdown_http(sockets))

    async def _shutdown_http(self, sockets: list[socket.socket] | None) -> None:
        queued = _accept_queued(self._listeners)
        for server in self.servers:
            server.close()
        loop = asyncio.get_running_loop()
        for connection in queued:
            try:
                await loop.connect_accepted_socket(self._protocol, connection)
            except OSError:
                connection.close()
        await super().shutdown(sockets)

    def _protocol(self) -> asyncio.Protocol:
        make: Any = self.config.http_protocol_class  # uvicorn's protocol classes take these
        protocol: asyncio.Protocol = make(
            config=self.config, server_state=self.server_state, app_state=self.lifespan.state
        )
        return protocol


def _accept_queued(listeners: Sequence[Any]) -> list[socket.socket]:
    """Every connection waiting in the listening sockets' queues, without blocking."""
    accepted: list[socket.socket] = []
    for listener in listeners:
        listener.setblocking(False)  # the event loop set the descriptor so already
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:  # BlockingIOError: the queue is empty
                break
            connection.setblocking(False)
            accepted.append(connection)
    return accepted


def _already_stopping(signum: int, frame: FrameType | None) -> None:
    """The worker is shutting down already: let it finish its exit hooks."""


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a request head and body may take; how many connections a worker keeps open."""

    header_timeout_s: float = 10.0
    max_connections: int = 1000
    body: BodyTimeout = field(default_factory=BodyTimeout)


def limited_protocol(
    max_field_bytes: int,
    max_fields: int,
    balance: ConnectionBalance | None = None,
    limits: ConnectionLimits | None = None,
) -> type[HttpToolsProtocol]:
    """httptools' protocol with gunicorn's header limits (``server.max_header_bytes``, ...).

    It also counts the worker's open connections in ``balance``, closes a connection whose
    request head is not complete ``header_timeout_s`` after it opened (or after the head
    began, on a kept-alive connection), answers 408 and closes one whose body is late
    (``limits.body``), and keeps at most ``max_connections`` open: a new one beyond it
    closes the longest-open connection that has no request in progress (a slow or idle
    client), else the one whose body has been arriving longest (408), or itself when
    every connection has a request in progress.

    httptools itself accepts any number and size of header fields; this answers 431 and
    closes the connection when the request line or a field is longer than
    ``max_field_bytes``, when there are more than ``max_fields`` fields, or when the head
    grows past all of them together (so memory stays bounded while it arrives).
    """
    bounds = limits or ConnectionLimits()

    class LimitedHttpToolsProtocol(TimedBody, HttpToolsProtocol):
        _max_head = (max_fields + 1) * (max_field_bytes + 4)
        _reading_head = True
        _head_bytes = 0
        _fields = 0
        _url_bytes = 0
        _refused = False

        _head_timer: asyncio.TimerHandle | None = None
        _opened = 0.0
        body_limit = bounds.body
        _stopping = False
        _lingering = False

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if balance is not None:
                balance.opened()
            self._opened = self.loop.time()
            self._head_timer = self.loop.call_later(bounds.header_timeout_s, self._head_late)
            if len(self.connections) > bounds.max_connections:
                self._make_room()

        def connection_lost(self, exc: Exception | None) -> None:
            if balance is not None:
                balance.closed()
            if self._head_timer is not None:
                self._head_timer.cancel()
            self.stop_body_timer()
            super().connection_lost(exc)

        def shutdown(self) -> None:
            """Graceful stop: an idle kept-alive connection is read a moment longer first.

            A request the client wrote just before may already sit unread in the socket:
            closing at once would reset it. Read for :data:`SHUTDOWN_GRACE_S`, answer what
            arrives (then close); if nothing came, half-close and linger (:data:`LINGER_S`)
            so that a request written later still meets an open socket.
            """
            self._stopping = True
            if self.cycle is None or self.cycle.response_complete:
                self.loop.call_later(SHUTDOWN_GRACE_S, self._close_if_idle)
            else:
                self.cycle.keep_alive = False

        def _close_if_idle(self) -> None:
            idle = self.cycle is None or self.cycle.response_complete
            if idle and not self.transport.is_closing():
                self._linger()

        def _linger(self) -> None:
            """Half-close, then discard what arrives until the client closes (see LINGER_S)."""
            self._lingering = True
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            if not self.transport.can_write_eof():  # e.g. TLS: no half-close to offer
                self.transport.close()
                return
            try:
                self.transport.write_eof()
            except OSError:  # the client went away meanwhile
                self.transport.close()
                return
            self.loop.call_later(LINGER_S, self._end_linger)

        def _end_linger(self) -> None:
            if not self.transport.is_closing():
                self.transport.close()

        def _idle(self) -> bool:
            return self._reading_head and (self.cycle is None or self.cycle.response_complete)

        def _head_late(self) -> None:
            self._head_timer = None
            if self._reading_head and not self.transport.is_closing():
                self.transport.close()  # no request to answer: its head never arrived

        def _make_room(self) -> None:
            others = [
                c
                for c in self.connections
                if c is not self and isinstance(c, LimitedHttpToolsProtocol)
            ]
            idle = [c for c in others if c._idle()]
            if idle:
                min(idle, key=lambda c: c._opened).transport.close()
                return
            sending = [c for c in others if c._receiving_body]
            if sending:
                min(sending, key=lambda c: c._body_started).refuse_body()
                return
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._lingering:
                return  # half-closed: a late request is not read (the client sees the end)
            if self._reading_head:
                self._head_bytes += len(data)
                if self._head_bytes > self._max_head:
                    self._refuse(f"the request head is larger than {self._max_head} bytes")
                    return
            super().data_received(data)
            self.time_body()

        def on_message_begin(self) -> None:
            self._reading_head, self._head_bytes, self._fields, self._url_bytes = True, 0, 0, 0
            if self._head_timer is None:  # a kept-alive connection's next request began
                self._head_timer = self.loop.call_later(bounds.header_timeout_s, self._head_late)
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._url_bytes += len(url)
            if self._url_bytes > max_field_bytes:
                self._refuse(f"the request line is longer than {max_field_bytes} bytes")
                raise _HeadRefusedError
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._fields += 1
            if self._fields > max_fields:
                self._refuse(f"the request has more than {max_fields} header fields")
                raise _HeadRefusedError
            if len(name) + len(value) + 2 > max_field_bytes:
                field = name.decode("latin-1")[:64]
                self._refuse(f"header field {field!r} is longer than {max_field_bytes} bytes")
                raise _HeadRefusedError
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._reading_head = False
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            self.body_began()
            before = self.cycle
            super().on_headers_complete()
            if self.cycle is not None and self.cycle is not before:  # this request's cycle
                self.cycle.transport = cast(asyncio.Transport, OneWriteTransport(self.transport))
            if self._stopping and self.cycle is not None:
                self.cycle.keep_alive = False  # answered during shutdown, then closed

        def send_400_response(self, msg: str) -> None:
            """httptools refused the request (a bad chunk size, a malformed head): JSON 400."""
            if not self._refused:  # a 431 already went out
                self._answer_and_close(
                    b"400 Bad Request",
                    f"the request is not valid HTTP/1.1 ({msg.rstrip('.')}); check its framing",
                )

        def _refuse(self, reason: str) -> None:
            self._answer_and_close(
                b"431 Request Header Fields Too Large", f"{reason}; send a smaller request head"
            )

        def _answer_and_close(self, status: bytes, message: str) -> None:
            self._refused = True
            body = orjson.dumps({"error": message})
            self.transport.write(
                b"HTTP/1.1 " + status + b"\r\nserver: gunicorn\r\n"
                b"content-type: application/json\r\nconnection: close\r\n"
                b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            self.transport.close()

    return LimitedHttpToolsProtocol


class _HeadRefusedError(Exception):
    """Stops httptools once a limit is hit (the 431 is already written)."""
