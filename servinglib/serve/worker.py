"""The gunicorn worker class: gthread, keeping a busy keep-alive connection on its thread.

gunicorn's gthread worker hands every kept-alive connection back to its main thread after
each response: a wake-up through a pipe, an epoll registration, another wake-up when the
next request arrives, and a new hand-off to the thread pool. For a client that sends its
next request at once (a load balancer's pooled connection, a batch client), that costs more
than the request itself. This worker lets the thread that answered wait a moment for the
connection's next request and serve it directly; a connection that stays quiet goes back
to the poller as before.

It lingers only while every connection of the worker can have a thread of its own
(connections <= threads), so it can never make a new connection wait for a thread, and not
at all while the worker is stopping.
"""

from __future__ import annotations

import select
from typing import Any

from gunicorn.workers.gthread import ThreadWorker

from servinglib.http.app import create_app
from servinglib.serve.app import worker_from_environment
from servinglib.worker import Worker

__all__ = ["LINGER_S", "LingeringThreadWorker"]

LINGER_S = 0.002  # how long a thread waits for the next request of its connection


class LingeringThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gthread, serving back-to-back requests of one connection on the same thread."""

    serving: Worker | None = None  # this process's worker, once built

    def load_wsgi(self) -> None:
        """Load every model (the worker), then build the WSGI app around it."""
        serving = worker_from_environment()
        self.serving = serving
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
