"""WSGI entry point for stock gunicorn workers.

``gunicorn -c python:servinglib.serve.gunicorn_conf servinglib.serve.wsgi:app``

servinglib's own worker classes build the app themselves (:mod:`servinglib.serve.app`);
this module serves stock gunicorn workers. The config file comes from
``SERVINGLIB_CONFIG`` (default ``servinglib.yaml``).
"""

from __future__ import annotations

from servinglib.http.app import create_app
from servinglib.serve.app import worker_from_environment

_worker = worker_from_environment()
app = create_app(_worker.service, _worker.metrics, _worker.config.server, shutdown=_worker.close)
