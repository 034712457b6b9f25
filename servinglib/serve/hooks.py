"""gunicorn server hooks: metrics directory hygiene and model loading without timeouts.

Models load inside each worker while gunicorn imports the app, before the worker accepts
any connection, so a worker gets no traffic until its models have been loaded and
self-tested. gunicorn kills a worker that stays silent for ``timeout`` seconds, and a long
``load()`` would look silent; a heartbeat thread tells the master the worker is alive
until the app has loaded.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from servinglib.config.env import CONFIG_ENV
from servinglib.config.spec import ServiceConfig, load_config
from servinglib.errors import ConfigError, ServinglibError

__all__ = [
    "ROLLOUT_ENV",
    "child_exit",
    "on_exit",
    "on_starting",
    "post_fork",
    "post_worker_init",
    "prepare_metrics_dir",
    "prepare_rollout_dir",
    "when_ready",
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
    shutil.rmtree(directory / "drift", ignore_errors=True)  # drift counts of a previous run
    shutil.rmtree(directory / "exemplars", ignore_errors=True)  # and exemplars
    if not given:
        owner = os.getpid()
        atexit.register(_remove_if_owner, directory, owner)
    return directory


def _remove_if_owner(directory: Path, owner: int) -> None:
    if os.getpid() == owner:  # forked workers inherit atexit handlers; only the master cleans
        shutil.rmtree(directory, ignore_errors=True)


ROLLOUT_ENV = "SERVINGLIB_ROLLOUT_DIR"

MIN_ADMIN_TOKEN_LENGTH = 32  # servinglib.serve.admin.MIN_TOKEN_LENGTH (not imported here:
# the admin module loads only in a master that serves it)
_admin: list[Any] = []  # the master's admin server and store sync (one per master process)
_controllers: list[Any] = []  # the master's rollout controller, when a model has a policy


def prepare_rollout_dir(config: ServiceConfig) -> Path | None:
    """When the admin API is enabled: check its token and create the desired-state directory.

    Raises:
        ConfigError: ``admin.enabled`` is true but the token variable is unset, empty or
            shorter than 32 characters.
    """
    stores = any(m.repository_url is not None for m in config.models)  # the store sync's too
    if not config.admin.enabled and not stores:
        os.environ.pop(ROLLOUT_ENV, None)
        return None
    token = os.environ.get(config.admin.token_env, "")
    if config.admin.enabled and len(token) < MIN_ADMIN_TOKEN_LENGTH:
        state = "is empty" if not token else f"has {len(token)} characters"
        raise ConfigError(
            f"admin.enabled is true but ${config.admin.token_env} {state}; set it to a random "
            f"token of at least {MIN_ADMIN_TOKEN_LENGTH} characters (python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'); the admin API refuses to run without one",
            source=str(config.source),
            key_path="admin.token_env",
        )
    directory = Path(tempfile.mkdtemp(prefix="servinglib-rollout-"))
    os.environ[ROLLOUT_ENV] = str(directory)
    atexit.register(_remove_if_owner, directory, os.getpid())
    return directory


def when_ready(server: Any) -> None:
    """Master ready (listening, no worker yet): watch for the ready line; start the admin API."""
    from servinglib.serve.ready import NOTE_ENV, watch_workers

    url = str(server.LISTENERS[0]) if server.LISTENERS else "?"
    watch_workers(
        url, server.num_workers, lambda: _worker_pids(server), os.environ.get(NOTE_ENV, "")
    )
    directory = os.environ.get(ROLLOUT_ENV)
    if not directory:
        return
    from servinglib.monitoring.logs import configure_logging

    config = load_config(os.environ[CONFIG_ENV])
    # Admin actions and store syncs are logged by the master.
    configure_logging(config.server.log_level, config.server.log_format)
    if any(m.repository_url is not None for m in config.models):
        from servinglib.serve.model_sync import start_store_sync

        _admin.append(start_store_sync(config, Path(directory), lambda: _worker_pids(server)))
    if not config.admin.enabled:
        return
    from servinglib.serve.admin import AdminServer

    try:
        admin = AdminServer(
            config,
            Path(directory),
            os.environ.get(config.admin.token_env, ""),
            config.admin.port,
            lambda: _worker_pids(server),
        )
    except ServinglibError as e:
        # gunicorn prints a RuntimeError as one "Error: ..." line and exits 1.
        raise RuntimeError(str(e)) from None
    admin.start()
    _admin.append(admin)
    from servinglib.serve.admin_rollout import start_controller

    controller = start_controller(admin, config)
    if controller is not None:
        _controllers.append(controller)


def _worker_pids(server: Any) -> set[int]:
    """The arbiter's live worker pids (the dict changes under us: retry a torn read)."""
    for _ in range(5):
        try:
            return set(server.WORKERS)
        except RuntimeError:
            continue
    return set()


def on_exit(server: Any) -> None:
    """Master leaving: close the admin listener."""
    while _controllers:
        _controllers.pop().stop()
    while _admin:
        _admin.pop().stop()


def on_starting(server: Any) -> None:
    """Master start: wipe metric files a previous run left behind."""
    directory = os.environ.get(MULTIPROC_ENV)
    if directory:
        for leftover in Path(directory).glob("*.db"):
            leftover.unlink()
        shutil.rmtree(Path(directory) / "drift", ignore_errors=True)
        shutil.rmtree(Path(directory) / "exemplars", ignore_errors=True)


def post_fork(server: Any, worker: Any) -> None:
    """Worker start: close the inherited admin listener; keep telling the master we are
    alive while models load."""
    for admin in _admin:
        if hasattr(admin, "close_inherited"):
            admin.close_inherited()
    _admin.clear()  # the master's, not this worker's: on_exit must not stop it here
    _controllers.clear()
    _booted.clear()
    interval = max(0.5, server.cfg.timeout / 4)
    from servinglib.serve.tracing_setup import start_tracing

    start_tracing()  # its export thread is this worker's own (none survives a fork)

    def heartbeat() -> None:
        while not _booted.wait(interval):
            worker.notify()

    threading.Thread(target=heartbeat, name="servinglib-boot-heartbeat", daemon=True).start()


class _ClosedListenerFilter(logging.Filter):
    """Drop gunicorn's "Error while closing socket [Errno 9]" from a stopping worker.

    The event loop owns the listening socket's descriptor and closes it when it stops
    serving; gunicorn then closes its own wrapper of the same descriptor and logs the
    harmless EBADF at INFO on every shutdown.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.getMessage().startswith("Error while closing socket")
            and "Bad file descriptor" in record.getMessage()
        )


def post_worker_init(worker: Any) -> None:
    """Worker has loaded the app (and every model): stop the boot heartbeat, report ready.

    A worker that serves gRPC reports ready itself, once its gRPC port is bound (it binds
    the port when it starts running, after this hook): before, the ready line could name a
    worker whose gRPC port was not listening yet.

    Everything alive now (modules, models, the app) lives as long as the worker, so it is
    moved out of the garbage collector's sight (``gc.freeze``): a full collection otherwise
    walks all of it, about 27 ms on the event loop with MiniLM loaded, every few seconds
    under load.
    """
    _booted.set()
    gc.freeze()
    logging.getLogger("gunicorn.error").addFilter(_ClosedListenerFilter())
    from servinglib.serve.ready import report_worker_ready

    serving = getattr(worker, "serving", None)  # servinglib's worker classes keep their Worker
    if serving is not None:
        if getattr(worker, "grpc", None) is None:  # else the worker reports once gRPC listens
            report_worker_ready(serving.service.catalog)
        return
    # A stock gunicorn worker serving servinglib.serve.wsgi:app: the app holds the service.
    extensions = getattr(getattr(worker, "wsgi", None), "extensions", None)
    if isinstance(extensions, dict) and "servinglib.serving.service" in extensions:
        report_worker_ready(extensions["servinglib.serving.service"].catalog)


def worker_exit(server: Any, worker: Any) -> None:
    """Worker leaving (after draining requests): flush shadow copies and the prediction log.

    servinglib's worker classes keep their :class:`~servinglib.serving.assembly.Worker` as
    ``worker.serving``; under a stock gunicorn worker the app of
    ``servinglib.serve.wsgi:app`` holds the same ``close`` as its shutdown extension.
    """
    serving = getattr(worker, "serving", None)
    if serving is not None:
        serving.close()
    else:
        extensions = getattr(getattr(worker, "wsgi", None), "extensions", {})
        shutdown = extensions.get("servinglib.shutdown") if isinstance(extensions, dict) else None
        if callable(shutdown):
            shutdown()
    from servinglib.monitoring.logs import flush_logs
    from servinglib.serve.tracing_setup import stop_tracing

    flush_logs()  # the access-log lines of the last requests, before anything that may wait
    stop_tracing()  # the spans still buffered, shadow copies' included (10 s at most)
    flush_logs()  # what stopping the tracing logged


def child_exit(server: Any, worker: Any) -> None:
    """Worker gone: drop its live gauges from the aggregated metrics."""
    if os.environ.get(MULTIPROC_ENV):
        from servinglib.monitoring.metrics import mark_worker_dead

        mark_worker_dead(worker.pid)
