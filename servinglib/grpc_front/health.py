"""The standard ``grpc.health.v1.Health`` service: ``Check``, ``Watch`` and, where the
installed ``grpcio-health-checking`` defines it, ``List``.

Statuses are set per service name (``""`` for the whole server); ``Check`` of a name never
set is NOT_FOUND, ``Watch`` of one answers SERVICE_UNKNOWN and goes on watching, as the
gRPC health protocol says.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

__all__ = ["HEALTH_SERVICE", "HealthServicer"]

HEALTH_SERVICE = "grpc.health.v1.Health"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class HealthServicer:
    """Health statuses by service name."""

    def __init__(self) -> None:
        self._statuses: dict[str, int] = {}
        self._changed = asyncio.Event()
        self._closed = False

    def set(self, service: str, status: int) -> None:
        """Set ``service``'s status (watchers are told of a change)."""
        if self._statuses.get(service) != status:
            self._statuses[service] = status
            self._changed.set()
            self._changed = asyncio.Event()

    def close(self) -> None:
        """End every watch (their last answer sent), as the server stops."""
        self._closed = True
        self._changed.set()

    async def Check(self, request: Any, context: Any) -> Any:  # noqa: N802
        """The status of ``request.service``."""
        status = self._statuses.get(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def List(self, request: Any, context: Any) -> Any:  # noqa: N802
        """Every service's status (the RPC that grpcio-health-checking 1.82 added)."""
        statuses = {
            name: health_pb2.HealthCheckResponse(status=status)
            for name, status in self._statuses.items()
        }
        return health_pb2.HealthListResponse(statuses=statuses)

    async def Watch(self, request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        """The status of ``request.service`` now, then at every change."""
        last = None
        while not self._closed:
            changed = self._changed
            status = self._statuses.get(request.service, _UNKNOWN)
            if status != last:
                last = status
                yield health_pb2.HealthCheckResponse(status=status)
            await changed.wait()
        status = self._statuses.get(request.service, _UNKNOWN)
        if status != last:
            yield health_pb2.HealthCheckResponse(status=status)
