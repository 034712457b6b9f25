"""The gRPC server of one worker: servinglib's own HTTP/2 server on the worker's event loop.

Every worker binds ``server.host:server.grpc_port`` with ``SO_REUSEPORT``, so the kernel
spreads new connections over the workers as it does for HTTP. Calls are served by
:mod:`~servinglib.grpc_front.http2` and :mod:`~servinglib.grpc_front.rpc` rather than
grpcio's server, whose own work per call was more than servinglib's whole REST request
path (see :doc:`explanation/grpc`). The server takes messages up to
``server.max_request_body_bytes``, accepts gzip and deflate, closes connections idle for
``server.keepalive_s``, and serves ``grpc.health.v1.Health`` next to the inference
service: its status (for the whole server, ``""``, and for
``inference.GRPCInferenceService``) follows the worker's readiness, and turns NOT_SERVING
when the worker starts draining; ``liveness`` follows the worker's liveness only (never its
models: a Kubernetes ``grpc:`` liveness probe names it).

Connections are spread over the workers as HTTP's are (``balance``, the workers' shared
table of open connections, :mod:`servinglib.serve.balance`): the kernel hands each new
connection to a worker by a hash, 20 and 13 of perf_analyzer's 33 in one run, and an HTTP/2
connection stays where it landed. A worker holding clearly more than the least busy one
sends GOAWAY on a connection once it answers a call there; the client finishes its calls
and reconnects, and after a few moves the counts differ by at most one or an eighth.

Example::

    front = GrpcFrontEnd(service, metrics, config.server, readiness, liveness)
    await front.start()          # on the worker's event loop, after its models loaded
    ...
    await front.stop(grace_s=25) # GOAWAY, in-flight calls answered, then closed
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import Protocol

from grpc_health.v1 import health_pb2

from servinglib.config.spec import ServerConfig
from servinglib.grpc_front.calls import InferCalls
from servinglib.grpc_front.handlers import SERVICE_NAME, method_table
from servinglib.grpc_front.health import HEALTH_SERVICE, NOT_SERVING, SERVING, HealthServicer
from servinglib.grpc_front.http2 import Http2Connection
from servinglib.grpc_front.proto import inference_pb2
from servinglib.grpc_front.rpc import GrpcApplication
from servinglib.grpc_front.servicer import InferenceServicer
from servinglib.monitoring.metrics import ServingMetrics
from servinglib.serving.service import InferenceService

__all__ = ["LIVENESS_SERVICE", "SERVICE_NAME", "Balance", "GrpcFrontEnd"]

log = logging.getLogger("servinglib.grpc")

INFER_METHODS = frozenset({"ModelInfer", "ModelStreamInfer"})  # they answer malformed requests
READINESS_POLL_S = 1.0  # how often the health status is brought up to date
LIVENESS_SERVICE = "liveness"  # the health service name that follows liveness, not readiness
BACKLOG = 2048


class Balance(Protocol):
    """The workers' shared count of open connections
    (``servinglib.serve.balance.ConnectionBalance``)."""

    def opened(self) -> None:
        """This worker accepted a connection."""

    def closed(self) -> None:
        """One of this worker's connections closed."""

    def crowded(self) -> bool:
        """Whether this worker holds clearly more connections than the least busy one."""


class GrpcFrontEnd:
    """The Open Inference gRPC service and the health service of one worker."""

    def __init__(
        self,
        service: InferenceService,
        metrics: ServingMetrics,
        server: ServerConfig,
        readiness: Callable[[], bool] | None = None,
        liveness: Callable[[], bool] | None = None,
        balance: Balance | None = None,
    ) -> None:
        self._config = server
        self._balance = balance
        self._readiness = readiness or service.is_ready
        self._liveness = liveness or (lambda: True)
        self._servicer = InferenceServicer(
            InferCalls(service, metrics, server),
            metrics,
            self._readiness,
            self._liveness,
            server.compress_min_bytes,
        )
        self._health: HealthServicer | None = None
        self._app: GrpcApplication | None = None
        self._server: asyncio.Server | None = None
        # Each connection, with its count of streams and when that count last moved.
        self._connections: dict[Http2Connection, tuple[int, float]] = {}
        self._watch: asyncio.Task[None] | None = None
        self.port = 0

    def balanced_by(self, balance: Balance) -> GrpcFrontEnd:
        """This front end, its connections counted in ``balance`` (the workers' shared
        table); returns itself."""
        self._balance = balance
        return self

    async def start(self) -> int:
        """Bind and serve; returns the port (the configured one, or the one chosen for 0).

        Raises:
            RuntimeError: the address cannot be bound.
        """
        config = self._config
        self._health = HealthServicer()
        methods = method_table(self._servicer, inference_pb2, SERVICE_NAME, INFER_METHODS)
        methods.update(method_table(self._health, health_pb2, HEALTH_SERVICE))
        self._app = GrpcApplication(methods, config.max_request_body_bytes)
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                self._connection,
                config.host,
                config.grpc_port,
                reuse_port=True,
                backlog=BACKLOG,
            )
        except OSError as e:
            raise RuntimeError(
                f"gRPC: cannot bind {config.host}:{config.grpc_port} ({e}); free the port or "
                "change server.grpc_port"
            ) from e
        for sock in self._server.sockets:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self.port = self._server.sockets[0].getsockname()[1]
        self._set_health(self._readiness(), self._liveness())
        self._watch = asyncio.ensure_future(self._follow_readiness())
        log.info("gRPC: serving %s on %s:%d", SERVICE_NAME, config.host, self.port)
        return self.port

    def _connection(self) -> Http2Connection:
        assert self._app is not None
        balance = self._balance
        if balance is None:
            connection = Http2Connection(self._app, self._lost)
        else:
            balance.opened()
            connection = Http2Connection(self._app, self._lost, balance.crowded)
        self._connections[connection] = (0, asyncio.get_running_loop().time())
        return connection

    def _lost(self, connection: Http2Connection) -> None:
        if self._connections.pop(connection, None) is not None and self._balance is not None:
            self._balance.closed()

    async def stop(self, grace_s: float) -> None:
        """Stop taking calls (GOAWAY), answer those in flight for up to ``grace_s``."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._server is None:
            return
        self._set_health(ready=False, live=False)
        if self._health is not None:
            self._health.close()
        self._server.close()
        for connection in list(self._connections):
            connection.go_away()
        assert self._app is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        # Until every connection closed: each answers its calls, then (its final GOAWAY a
        # round trip after the first) closes.
        while self._connections and loop.time() < deadline:
            calls = set(self._app.calls)
            if calls:
                await asyncio.wait(calls, timeout=deadline - loop.time())
            else:
                await asyncio.sleep(0.05)
        late = set(self._app.calls)
        if late:
            log.warning("gRPC: %d calls running after %.0f s; cancelled", len(late), grace_s)
            for call in late:
                call.cancel()
        for connection in list(self._connections):
            connection.abort(0, "the server stopped")
        self._server = None

    def _set_health(self, ready: bool, live: bool) -> None:
        if self._health is None:
            return
        status = SERVING if ready else NOT_SERVING
        for name in ("", SERVICE_NAME):
            self._health.set(name, status)
        self._health.set(LIVENESS_SERVICE, SERVING if live else NOT_SERVING)

    async def _follow_readiness(self) -> None:
        """Keep the health statuses equal to the worker's readiness and liveness, and
        close connections idle for ``server.keepalive_s``."""
        state = (self._readiness(), self._liveness())
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(READINESS_POLL_S)
            now = (self._readiness(), self._liveness())
            if now != state:
                state = now
                self._set_health(*state)
            self._close_idle(loop.time())

    def _close_idle(self, now: float) -> None:
        for connection, (opened, seen) in list(self._connections.items()):
            if connection.streams or connection.opened != opened:
                self._connections[connection] = (connection.opened, now)
            elif now - seen > self._config.keepalive_s:
                connection.go_away()
