"""gunicorn server hooks: metrics directory hygiene and model loading without timeouts.

Models load inside each worker while gunicorn imports the app, before the worker accepts
any connection, so a worker gets no traffic until its models have been loaded and
self-tested. gunicorn kills a worker that stays silent for ``timeout`` seconds, and a long
``load()`` would look silent; a heartbeat thread tells the master the worker is alive
until the app has loaded.
"""

from __future__ import annotations

import atexit
import os
import shutil
import threading
from pathlib import Path
from typing import Any

__all__ = [
    "child_exit",
    "on_starting",
    "post_fork",
    "post_worker_init",
    "prepare_metrics_dir",
    "worker_exit",
]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_booted = threading.Event()


def prepare_metrics_dir(default: Path) -> Path:
    """Set ``PROMETHEUS_MULTIPROC_DIR`` (before prometheus_client is imported) and empty it.

    A directory given by the environment is only emptied of metric files (``*.db``); a
    directory servinglib creates is removed when the process that created it exits
    (never when a forked worker exits).
    """
    given = os.environ.get(MULTIPROC_ENV)
    directory = Path(given) if given else default
    os.environ[MULTIPROC_ENV] = str(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for leftover in directory.glob("*.db"):
        leftover.unlink()
    if not given:
        owner = os.getpid()
        atexit.register(_remove_if_owner, directory, owner)
    return directory


def _remove_if_owner(directory: Path, owner: int) -> None:
    if os.getpid() == owner:  # forked workers inherit atexit handlers; only the master cleans
        shutil.rmtree(directory, ignore_errors=True)


def on_starting(server: Any) -> None:
    """Master start: wipe metric files a previous run left behind."""
    directory = os.environ.get(MULTIPROC_ENV)
    if directory:
        for leftover in Path(directory).glob("*.db"):
            leftover.unlink()


def post_fork(server: Any, worker: Any) -> None:
    """Worker start: keep telling the master we are alive while models load."""
    _booted.clear()
    interval = max(0.5, server.cfg.timeout / 4)

    def heartbeat() -> None:
        while not _booted.wait(interval):
            worker.notify()

    threading.Thread(target=heartbeat, name="servinglib-boot-heartbeat", daemon=True).start()


def post_worker_init(worker: Any) -> None:
    """Worker has loaded the app (and every model): stop the boot heartbeat."""
    _booted.set()


def worker_exit(server: Any, worker: Any) -> None:
    """Worker leaving (after draining requests): flush shadow copies and the prediction log."""
    app = getattr(worker, "wsgi", None)
    extensions = getattr(app, "extensions", {})
    shutdown = extensions.get("servinglib.shutdown") if isinstance(extensions, dict) else None
    if callable(shutdown):
        shutdown()


def child_exit(server: Any, worker: Any) -> None:
    """Worker gone: drop its live gauges from the aggregated metrics."""
    if os.environ.get(MULTIPROC_ENV):
        from servinglib.monitoring.metrics import mark_worker_dead

        mark_worker_dead(worker.pid)
