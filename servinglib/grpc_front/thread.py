"""The gRPC front end of a worker that has no event loop of its own (the gthread worker).

The asyncio worker runs :class:`~servinglib.grpc_front.server.GrpcFrontEnd` on its event
loop. The gthread worker serves HTTP from a thread pool and has none, so this gives the same
front end a loop on a thread of its own: the same servicer, health service, request path
(``InferenceService.infer_async``: the model runs on its version's executor, never on this
loop), limits and drain. Every worker binds ``server.grpc_port`` with ``SO_REUSEPORT``, as
under the asyncio worker.

Example::

    front = GrpcThread(GrpcFrontEnd(service, metrics, config.server))
    front.start()                # after fork, once the models loaded; raises if it cannot bind
    front.begin_stop(grace_s=25) # from the SIGTERM handler: returns at once
    front.join(timeout_s=28)     # before the worker's exit hooks flush the prediction log
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading

from servinglib.grpc_front.server import GrpcFrontEnd

__all__ = ["GrpcThread"]

log = logging.getLogger("servinglib.grpc")

START_TIMEOUT_S = 30.0  # binding and starting grpc core; far more than it takes


class GrpcThread:
    """A :class:`GrpcFrontEnd` served on an event loop in a daemon thread."""

    def __init__(self, front: GrpcFrontEnd) -> None:
        self._front = front
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="servinglib-grpc", daemon=True
        )
        self._stopped: concurrent.futures.Future[None] | None = None

    @property
    def port(self) -> int:
        """The bound port (0 before :meth:`start`)."""
        return self._front.port

    def start(self) -> int:
        """Start the loop thread and the server on it; returns the bound port.

        Raises:
            RuntimeError: the address cannot be bound (grpc core's error).
        """
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(self._front.start(), self._loop)
        return started.result(timeout=START_TIMEOUT_S)

    def begin_stop(self, grace_s: float) -> None:
        """Stop taking calls (GOAWAY) and answer those in flight for up to ``grace_s``.

        Returns at once (it is called from a signal handler); :meth:`join` waits. A second
        call does nothing.
        """
        if self._stopped is None and self._thread.is_alive():
            self._stopped = asyncio.run_coroutine_threadsafe(self._front.stop(grace_s), self._loop)

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the drain begun by :meth:`begin_stop`, then end the
        loop (what is still running then is abandoned with the process)."""
        if not self._thread.is_alive():
            return
        if self._stopped is not None:
            try:
                self._stopped.result(timeout=timeout_s)
            except concurrent.futures.TimeoutError:
                log.warning("gRPC: calls still in flight after %.0f s; leaving them", timeout_s)
            except Exception:
                log.exception("gRPC: the server failed while stopping")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5.0)
