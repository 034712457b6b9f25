"""``servinglib serve``: validate the config, prepare metrics, run gunicorn."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from gunicorn.app.base import BaseApplication

from servinglib.config.env import CONFIG_ENV
from servinglib.config.spec import ServiceConfig, load_config
from servinglib.errors import ServinglibError
from servinglib.serve.hooks import prepare_metrics_dir, prepare_rollout_dir
from servinglib.serve.ports import port_is_free
from servinglib.serve.ready import NOTE_ENV
from servinglib.serve.settings import WSGI_APP, gunicorn_settings

__all__ = ["serve"]


class _GunicornApp(BaseApplication):  # type: ignore[misc]
    """gunicorn application whose WSGI app is imported in each worker, after fork."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self._settings = settings
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        from gunicorn.util import import_app

        return import_app(WSGI_APP)


def serve(
    config_path: str | os.PathLike[str],
    *,
    host: str | None = None,
    port: int | None = None,
    workers: int | None = None,
    threads: int | None = None,
    worker: str | None = None,
    ready_note: str = "",
) -> None:
    """Serve every model of ``config_path`` with gunicorn until interrupted.

    Prints one ``ready:`` line, then ``ready_note`` (``{url}`` replaced), once every worker
    has loaded its models.

    Raises:
        ConfigError: the config is invalid.
        ServinglibError: another process holds the port.

    Example::

        serve("servinglib.yaml", port=8080, workers=2)
    """
    # Flags go through the same schema as the file and SERVINGLIB_* variables.
    flags = {
        "SERVINGLIB_HOST": host,
        "SERVINGLIB_PORT": port,
        "SERVINGLIB_WORKERS": workers,
        "SERVINGLIB_THREADS": threads,
        "SERVINGLIB_WORKER": worker,
    }
    environ = {**os.environ, **{k: str(v) for k, v in flags.items() if v is not None}}
    config: ServiceConfig = load_config(config_path, environ)  # fail fast, with a clear message
    server = config.server
    if not port_is_free(server.host, server.port):
        raise ServinglibError(
            f"port {server.port} is taken by another process; pass --port N or set SERVINGLIB_PORT"
        )
    if server.grpc_port and not port_is_free(server.host, server.grpc_port):
        raise ServinglibError(
            f"gRPC port {server.grpc_port} (server.grpc_port) is taken by another process; "
            "set server.grpc_port or SERVINGLIB_GRPC_PORT to a free port"
        )
    prepare_metrics_dir(Path(tempfile.gettempdir()) / f"servinglib-metrics-{os.getpid()}")
    prepare_rollout_dir(config)
    if any(m.repository_url is not None for m in config.models):
        from servinglib.serve.model_sync import initial_sync

        initial_sync(config)  # once per server, before any worker: workers read the cache
    # Workers read the config again: hand them the same overrides.
    os.environ.update({k: v for k, v in environ.items() if k.startswith("SERVINGLIB_")})
    os.environ[CONFIG_ENV] = str(config.source)
    os.environ[NOTE_ENV] = ready_note
    _GunicornApp(gunicorn_settings(server)).run()
