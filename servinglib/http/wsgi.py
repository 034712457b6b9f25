"""WSGI entry point: ``gunicorn -c <servinglib gunicorn conf> servinglib.http.wsgi:app``.

The config file comes from ``SERVINGLIB_CONFIG`` (default ``servinglib.yaml``).
"""

from __future__ import annotations

import os

from servinglib.http.app import create_app_from_config

app = create_app_from_config(os.environ.get("SERVINGLIB_CONFIG", "servinglib.yaml"))
