"""The gunicorn worker class: gthread, keeping a busy keep-alive connection on its thread.

gunicorn's gthread worker hands every kept-alive connection back to its main thread after
each response: a wake-up through a pipe, an epoll registration, another wake-up when the
next request arrives, and a new hand-off to the thread pool. For a client that sends its
next request at once (a load balancer's pooled connection, a batch client), that costs more
than the request itself. This worker lets the thread that answered wait a moment for the
connection's next request and serve it directly when it is all there; a connection that
stays quiet, or whose next request is still arriving, goes back to the poller as before.
Requests are read by the main thread first, with time limits, a cap on open connections
and admission control (:mod:`servinglib.serve.thread_connections`).

It lingers only while every connection of the worker can have a thread of its own
(connections <= threads), so it can never make a new connection wait for a thread, and not
at all while the worker is stopping.

gunicorn answers what it refuses itself (a malformed request line or header, a transfer
coding it does not know, a bad chunk) with an HTML page; this worker's ``handle_error``
sends the same status with a JSON ``{"error": ...}`` body instead, like every other answer
of servinglib (:mod:`servinglib.serve.refusals`).

With ``server.grpc_port`` set, each worker also serves gRPC on an event loop in a thread of
its own (:mod:`servinglib.grpc_front.thread`), drained with HTTP on SIGTERM.
"""

from __future__ import annotations

import select
import socket
from typing import Any

from servinglib.http._context import log_request, request_id_from
from servinglib.http.app import create_app
from servinglib.serve.app import worker_from_environment
from servinglib.serve.body_timeout import BodyTimeout
from servinglib.serve.ready import report_worker_ready
from servinglib.serve.refusals import refusal
from servinglib.serve.request_framing import RequestFraming, head_end
from servinglib.serve.thread_connections import GuardedThreadWorker, json_refusal
from servinglib.serving.assembly import Worker

__all__ = ["LINGER_S", "LingeringThreadWorker"]

LINGER_S = 0.002  # how long a thread waits for the next request of its connection
_PEEK_BYTES = 65536  # a next request larger than this goes back to the main thread


class LingeringThreadWorker(GuardedThreadWorker):
    """gthread, serving back-to-back requests of one connection on the same thread."""

    serving: Worker | None = None  # this process's worker, once built
    grpc: Any = None  # a GrpcThread (servinglib.grpc_front.thread), when server.grpc_port is set

    def load_wsgi(self) -> None:
        """Load every model (the worker), then build the WSGI app around it."""
        serving = worker_from_environment()
        self.serving = serving
        server = serving.config.server
        self.header_timeout_s = server.header_timeout_s
        self.body_timeout = BodyTimeout(server.body_timeout_s, server.body_min_bytes_per_s)
        self.max_body_bytes = server.max_request_body_bytes
        self.admission.deadlines_s = {m.name: m.deadline_ms / 1000 for m in serving.config.models}
        app = create_app(serving.service, serving.metrics, server, liveness=serving.is_live)
        self.wsgi = self.with_queue_wait(app)
        if server.grpc_port:  # imported only here, after fork: grpc must not start in the master
            from servinglib.grpc_front.server import GrpcFrontEnd
            from servinglib.grpc_front.thread import GrpcThread

            front = GrpcFrontEnd(serving.service, serving.metrics, server, liveness=serving.is_live)
            self.grpc = GrpcThread(front)

    def run(self) -> None:
        """gthread's loop, with the gRPC server on a thread beside it (when configured).

        The gRPC drain starts with the HTTP one (:meth:`handle_exit`); the worker's exit
        hooks (prediction log flush) run only once both are done.
        """
        if self.grpc is not None:
            self.grpc.start()
            if self.serving is not None:
                report_worker_ready(self.serving.service.catalog)  # now gRPC listens too
        try:
            super().run()
        finally:
            if self.grpc is not None:
                self.grpc.begin_stop(self._grpc_grace_s())
                self.grpc.join(self._grpc_grace_s() + 1.0)

    def handle_exit(self, sig: int, frame: Any) -> None:
        """SIGTERM: gthread's graceful stop, and the gRPC server's at the same time."""
        super().handle_exit(sig, frame)
        if self.grpc is not None:
            self.grpc.begin_stop(self._grpc_grace_s())

    def _grpc_grace_s(self) -> float:
        return max(1.0, float(self.cfg.graceful_timeout) - 2.0)  # then the exit hooks

    def shed_before_thread(self, model: str, path: str) -> None:
        """Count and log the refusal like any other shed request (outcome ``shed``)."""
        serving = self.serving
        if serving is None:
            return
        known = model if model in serving.service.models else ""
        protocol = "infer" if path == "/infer" else "v2"
        serving.metrics.observe_request(known or "_unknown", "", protocol, "shed", 0.0)
        log_request(request_id_from(None), "POST", path, 503, 0.0, known, "", protocol)

    def handle_quit(self, sig: int, frame: Any) -> None:
        """SIGQUIT (and SIGINT, which the master turns into SIGQUIT): drain like SIGTERM."""
        self.handle_exit(sig, frame)

    def handle(self, conn: Any) -> Any:
        """Serve a request, then the connection's next ones while they follow at once."""
        keepalive = super().handle(conn)
        while keepalive is True and self._may_linger() and _next_request_ready(conn):
            keepalive = super().handle(conn)
        return keepalive

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """What gunicorn refused (or a server error), answered in JSON with gunicorn's status.

        gunicorn's access log is off (servinglib writes its own), so only the log line and
        the answer are left of its ``handle_error``.
        """
        status, message = refusal(exc)
        if status.startswith("500"):
            where = f"{req.method} {req.uri}" if hasattr(req, "method") else "(no URI read)"
            self.log.exception("Error handling request %s", where)
        else:
            ip = addr[0] if addr else ""
            self.log.warning("Invalid request from ip=%s: %s", ip, exc)
        try:
            client.sendall(json_refusal(status, message))
        except OSError:
            self.log.debug("Failed to send error message.")

    def _may_linger(self) -> bool:
        return bool(self.alive) and self.nr_conns <= self.cfg.threads


def _next_request_ready(conn: Any) -> bool:
    """Whether the connection's whole next request arrives within :data:`LINGER_S`.

    Only a request already complete is served on this thread: one whose head or body is
    still on its way goes back to the main thread, which reads it without blocking.
    """
    buffered = conn.parser.unreader.buf.getvalue()
    try:
        if not buffered:
            readable, _, _ = select.select([conn.sock], [], [], LINGER_S)
            if not readable:
                return False
        peeked = buffered + conn.sock.recv(_PEEK_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        peeked = buffered
    except (OSError, ValueError):
        return False
    if head_end(peeked) < 0:
        return False
    return RequestFraming.of_head(peeked).complete(peeked)
