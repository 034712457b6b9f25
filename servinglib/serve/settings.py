"""gunicorn settings derived from ``server:`` in servinglib.yaml."""

from __future__ import annotations

import resource
from typing import Any

from servinglib.config.spec import ServerConfig
from servinglib.serve import hooks
from servinglib.serve.versions import check_gunicorn

__all__ = ["WORKER_CLASSES", "WSGI_APP", "connection_cap", "gunicorn_settings"]

WSGI_APP = "servinglib.serve.wsgi:app"
WORKER_CLASSES = {
    "asyncio": "servinglib.serve.asgi_worker.AsyncioWorker",
    "gthread": "servinglib.serve.worker.LingeringThreadWorker",
}


def gunicorn_settings(server: ServerConfig) -> dict[str, Any]:
    """gunicorn settings for ``server``, with servinglib's lifecycle hooks.

    ``server.worker`` picks the worker class: asyncio (an event loop answering /infer,
    Flask routes on threads) or gthread (a thread per request). Either way ONNX Runtime and
    NumPy release the GIL, so model work overlaps the HTTP work.
    ``keepalive`` stays above Envoy's upstream idle timeout (60 s), or Envoy reuses a
    connection gunicorn just closed and clients see sporadic 503s. ``timeout`` stays above
    the Envoy route timeout (15 s): a worker killed by gunicorn loses every in-flight request.

    Raises:
        ConfigError: the installed gunicorn is older than servinglib's floor.
    """
    check_gunicorn()
    return {
        "bind": [f"{server.host}:{server.port}"],
        "workers": server.workers,
        "threads": server.threads,
        "worker_class": WORKER_CLASSES[server.worker],
        "timeout": server.timeout_s,
        "graceful_timeout": server.graceful_timeout_s,
        "keepalive": server.keepalive_s,
        "worker_connections": connection_cap(server.max_connections),
        "max_requests": server.max_requests,
        "max_requests_jitter": server.max_requests_jitter,
        "limit_request_field_size": server.max_header_bytes,
        "limit_request_fields": server.max_headers,
        "control_socket_disable": True,  # the admin API is servinglib's: loopback + token
        "preload_app": False,  # models load in each worker after fork, never in the master
        "loglevel": server.log_level,
        "accesslog": None,  # servinglib writes its own JSON request log
        "on_starting": hooks.on_starting,
        "when_ready": hooks.when_ready,
        "on_exit": hooks.on_exit,
        "post_fork": hooks.post_fork,
        "post_worker_init": hooks.post_worker_init,
        "worker_exit": hooks.worker_exit,
        "child_exit": hooks.child_exit,
    }


def connection_cap(configured: int) -> int:
    """``server.max_connections``, kept below this process's file limit (64 spare)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(16, min(configured, soft - 64))
