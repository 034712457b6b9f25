"""The servinglib app of a gunicorn worker: a serving Worker and its HTTP app.

The config file comes from ``SERVINGLIB_CONFIG`` (default ``servinglib.yaml``); the admin
API's desired-state directory, when the master enabled it, from ``SERVINGLIB_ROLLOUT_DIR``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from servinglib.config.env import CONFIG_ENV, DEFAULT_CONFIG
from servinglib.http.app import ServingApp, create_app
from servinglib.serve.hooks import ROLLOUT_ENV
from servinglib.serving.assembly import Worker, load_worker

__all__ = ["CONFIG_ENV", "create_app_from_config", "worker_from_environment"]


def worker_from_environment() -> Worker:
    """Build this process's worker from the environment gunicorn's master set up."""
    rollout_dir = os.environ.get(ROLLOUT_ENV)
    return load_worker(
        os.environ.get(CONFIG_ENV, DEFAULT_CONFIG),
        Path(rollout_dir) if rollout_dir else None,
        retire=_retire,
    )


def _retire() -> None:
    """Exit gracefully, as on gunicorn's SIGTERM: the master starts a replacement."""
    os.kill(os.getpid(), signal.SIGTERM)


def create_app_from_config(path: str | os.PathLike[str]) -> ServingApp:
    """Load the config, load and self-test every model version, and build the WSGI app.

    Example::

        client = create_app_from_config("servinglib.yaml").test_client()
        client.post("/infer", json={"model_id": "eta", "features": {"distance_km": 2.0}})
    """
    worker = load_worker(path)
    return create_app(worker.service, worker.metrics, worker.config.server, shutdown=worker.close)
