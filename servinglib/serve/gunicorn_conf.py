"""The shipped gunicorn config file.

Use it as ``gunicorn -c python:servinglib.serve.gunicorn_conf servinglib.serve.wsgi:app``.

Reads ``SERVINGLIB_CONFIG`` (default ``servinglib.yaml``) and applies its ``server:``
settings and servinglib's hooks; sets up the Prometheus multiprocess directory before
anything imports prometheus_client.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from servinglib.config.env import CONFIG_ENV, DEFAULT_CONFIG
from servinglib.config.spec import load_config
from servinglib.serve.hooks import prepare_metrics_dir, prepare_rollout_dir
from servinglib.serve.settings import gunicorn_settings

os.environ.setdefault(CONFIG_ENV, DEFAULT_CONFIG)
_config = load_config(os.environ[CONFIG_ENV])
prepare_metrics_dir(Path(tempfile.gettempdir()) / f"servinglib-metrics-{os.getpid()}")
prepare_rollout_dir(_config)
globals().update(gunicorn_settings(_config.server))
