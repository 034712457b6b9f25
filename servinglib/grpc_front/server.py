"""The gRPC server of one worker: grpcio's asyncio server on the worker's event loop.

Every worker binds ``server.host:server.grpc_port`` with ``SO_REUSEPORT``, so the kernel
spreads new connections over the workers as it does for HTTP. The server takes messages up
to ``server.max_request_body_bytes``, accepts gzip, keeps idle connections alive with HTTP/2
pings, and serves ``grpc.health.v1.Health`` next to the inference service: its status (for
the whole server, ``""``, and for ``inference.GRPCInferenceService``) follows the worker's
readiness, and turns NOT_SERVING when the worker starts draining; ``liveness`` follows the
worker's liveness only (never its models: a Kubernetes ``grpc:`` liveness probe names it).

Example::

    front = GrpcFrontEnd(service, metrics, config.server, readiness, liveness)
    await front.start()          # on the worker's event loop, after its models loaded
    ...
    await front.stop(grace_s=25) # in-flight calls answered, then GOAWAY
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from servinglib.config.spec import ServerConfig
from servinglib.grpc_front.calls import InferCalls
from servinglib.grpc_front.handlers import SERVICE_NAME, method_handlers
from servinglib.grpc_front.servicer import InferenceServicer
from servinglib.monitoring.metrics import ServingMetrics
from servinglib.serving.service import InferenceService

__all__ = ["LIVENESS_SERVICE", "SERVICE_NAME", "GrpcFrontEnd"]

log = logging.getLogger("servinglib.grpc")

INFER_METHODS = frozenset({"ModelInfer", "ModelStreamInfer"})  # they answer malformed requests
READINESS_POLL_S = 1.0  # how often the health status is brought up to date
LIVENESS_SERVICE = "liveness"  # the health service name that follows liveness, not readiness

_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def server_options(server: ServerConfig) -> list[tuple[str, int]]:
    """grpc core channel arguments: message limits, port sharing, keepalive."""
    limit = server.max_request_body_bytes
    return [
        ("grpc.max_receive_message_length", limit),
        # Answers are not the client's to bound: a large output must not fail the call.
        ("grpc.max_send_message_length", -1),
        ("grpc.so_reuseport", 1),
        ("grpc.keepalive_time_ms", server.keepalive_s * 1000),
        ("grpc.keepalive_timeout_ms", 20_000),
        # Clients (Envoy, grpc-go) ping idle connections; allow it every 10 s or more.
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.max_connection_idle_ms", server.keepalive_s * 1000),
    ]


class GrpcFrontEnd:
    """The Open Inference gRPC service and the health service of one worker."""

    def __init__(
        self,
        service: InferenceService,
        metrics: ServingMetrics,
        server: ServerConfig,
        readiness: Callable[[], bool] | None = None,
        liveness: Callable[[], bool] | None = None,
    ) -> None:
        self._config = server
        self._readiness = readiness or service.is_ready
        self._liveness = liveness or (lambda: True)
        self._servicer = InferenceServicer(
            InferCalls(service, metrics, server),
            metrics,
            self._readiness,
            self._liveness,
            server.compress_min_bytes,
        )
        self._health = health.aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self._watch: asyncio.Task[None] | None = None
        self.port = 0

    async def start(self) -> int:
        """Bind and serve; returns the port (the configured one, or the one chosen for 0).

        Raises:
            RuntimeError: the address cannot be bound.
        """
        config = self._config
        server = grpc.aio.server(options=server_options(config))
        handlers = method_handlers(self._servicer, INFER_METHODS)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),)
        )
        server.add_registered_method_handlers(SERVICE_NAME, handlers)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        host = f"[{config.host}]" if ":" in config.host else config.host  # an IPv6 address
        self.port = server.add_insecure_port(f"{host}:{config.grpc_port}")
        await server.start()
        self._server = server
        await self._set_health(self._readiness(), self._liveness())
        self._watch = asyncio.ensure_future(self._follow_readiness())
        log.info("gRPC: serving %s on %s:%d", SERVICE_NAME, config.host, self.port)
        return self.port

    async def stop(self, grace_s: float) -> None:
        """Stop taking calls (GOAWAY), answer those in flight for up to ``grace_s``."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._server is None:
            return
        await self._set_health(ready=False, live=False)
        await self._server.stop(grace_s)
        self._server = None

    async def _set_health(self, ready: bool, live: bool) -> None:
        status = _SERVING if ready else _NOT_SERVING
        for name in ("", SERVICE_NAME):
            await self._health.set(name, status)
        await self._health.set(LIVENESS_SERVICE, _SERVING if live else _NOT_SERVING)

    async def _follow_readiness(self) -> None:
        """Keep the health statuses equal to the worker's readiness and liveness."""
        state = (self._readiness(), self._liveness())
        while True:
            await asyncio.sleep(READINESS_POLL_S)
            now = (self._readiness(), self._liveness())
            if now != state:
                state = now
                await self._set_health(*state)
