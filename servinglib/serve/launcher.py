"""``servinglib serve``: validate the config, prepare metrics, run gunicorn."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from gunicorn.app.base import BaseApplication

from servinglib.config import ServiceConfig, load_config
from servinglib.serve.hooks import prepare_metrics_dir
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
) -> None:
    """Serve every model of ``config_path`` with gunicorn until interrupted.

    Example::

        serve("servinglib.yaml", port=8080, workers=2)
    """
    config: ServiceConfig = load_config(config_path)  # fail fast, with a clear message
    server = replace(
        config.server,
        host=host if host is not None else config.server.host,
        port=port if port is not None else config.server.port,
        workers=workers if workers is not None else config.server.workers,
        threads=threads if threads is not None else config.server.threads,
    )
    created = Path(tempfile.mkdtemp(prefix="servinglib-metrics-"))
    directory = prepare_metrics_dir(created)
    if directory == created:
        atexit.register(shutil.rmtree, created, ignore_errors=True)
    else:
        created.rmdir()
    os.environ["SERVINGLIB_CONFIG"] = str(config.source)
    _GunicornApp(gunicorn_settings(server)).run()
