"""The asyncio gunicorn worker: uvicorn's event loop serving servinglib's ASGI front end.

gunicorn still runs the show (pre-fork, hooks, worker restarts, graceful shutdown); each
worker runs one uvloop event loop with httptools' C HTTP parser instead of a thread per
connection. The worker loads the same app as the gthread worker (``servinglib.http.wsgi:app``)
and wraps it in :class:`servinglib.http.asgi.AsgiFrontEnd`.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any, ClassVar

from uvicorn_worker import UvicornWorker

from servinglib.http.asgi import AsgiFrontEnd

__all__ = ["AsyncioWorker"]


class AsyncioWorker(UvicornWorker):  # type: ignore[misc]
    """gunicorn worker: one event loop, ``/infer`` on the loop, the rest in Flask threads."""

    CONFIG_KWARGS: ClassVar[dict[str, Any]] = {
        "loop": "uvloop",
        "http": "httptools",
        "lifespan": "off",  # models load when the app is imported, in the worker
        "access_log": False,  # servinglib writes its own JSON request log
        "server_header": False,
    }

    def load_wsgi(self) -> None:
        """Load the servinglib app, then put the event-loop front end around it."""
        super().load_wsgi()
        app: Any = getattr(self, "wsgi")  # noqa: B009 (set by gunicorn, untyped)
        self.wsgi = AsgiFrontEnd(app, threads=self.cfg.threads)

    async def _serve(self) -> None:
        # uvicorn re-raises SIGTERM/SIGINT once its graceful shutdown is done; with the
        # default handler that would kill the worker before gunicorn's worker_exit hook
        # flushes the prediction log and shadow copies. From here on they are no-ops.
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, _already_stopping)
        await super()._serve()


def _already_stopping(signum: int, frame: FrameType | None) -> None:
    """The worker is shutting down already: let it finish its exit hooks."""
