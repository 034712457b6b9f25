"""The gunicorn worker class: gthread, keeping a busy keep-alive connection on its thread.

gunicorn's gthread worker hands every kept-alive connection back to its main thread after
each response: a wake-up through a pipe, an epoll registration, another wake-up when the
next request arrives, and a new hand-off to the thread pool. For a client that sends its
next request at once (a load balancer's pooled connection, a batch client), that costs more
than the request itself. This worker lets the thread that answered wait a moment for the
connection's next request and serve it directly; a connection that stays quiet goes back
to the poller as before. Request heads are read by the main thread first, with a time
limit and a cap on open connections (:mod:`servinglib.serve.thread_connections`).

It lingers only while every connection of the worker can have a thread of its own
(connections <= threads), so it can never make a new connection wait for a thread, and not
at all while the worker is stopping.

gunicorn answers what it refuses itself (a malformed request line or header, a transfer
coding it does not know, a bad chunk) with an HTML page; this worker's ``handle_error``
sends the same status with a JSON ``{"error": ...}`` body instead, like every other answer
of servinglib (:mod:`servinglib.serve.refusals`).
"""

from __future__ import annotations

import select
from typing import Any

from servinglib.http.app import create_app
from servinglib.serve.app import worker_from_environment
from servinglib.serve.refusals import refusal
from servinglib.serve.thread_connections import GuardedThreadWorker, json_refusal
from servinglib.serving.assembly import Worker

__all__ = ["LINGER_S", "LingeringThreadWorker"]

LINGER_S = 0.002  # how long a thread waits for the next request of its connection


class LingeringThreadWorker(GuardedThreadWorker):
    """gthread, serving back-to-back requests of one connection on the same thread."""

    serving: Worker | None = None  # this process's worker, once built

    def load_wsgi(self) -> None:
        """Load every model (the worker), then build the WSGI app around it."""
        serving = worker_from_environment()
        self.serving = serving
        self.header_timeout_s = serving.config.server.header_timeout_s
        self.wsgi = create_app(
            serving.service, serving.metrics, serving.config.server, liveness=serving.is_live
        )

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
    """Whether the connection's next request arrives within :data:`LINGER_S`."""
    if conn.parser.unreader.buf.getvalue():
        return True  # already read ahead
    try:
        readable, _, _ = select.select([conn.sock], [], [], LINGER_S)
    except (OSError, ValueError):
        return False
    return bool(readable)
