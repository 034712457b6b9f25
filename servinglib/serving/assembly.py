"""One serving worker, assembled from a config: the service, its metrics and how to close it.

Both gunicorn worker classes (and tests) build their worker here, after fork, so every
process loads its own models: ONNX Runtime and torch sessions are not fork-safe. The HTTP
layer then gets only what it serves with (the service and the metrics), never the
registry, the shadow router, the rollout watcher or the prediction log behind them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servinglib.compose.calls import LaneCaller
from servinglib.config.spec import ServiceConfig, load_config
from servinglib.lifecycle.registry import ModelRegistry
from servinglib.lifecycle.rollout import RolloutWatcher
from servinglib.monitoring.drift import DriftMonitor
from servinglib.monitoring.log_fanout import open_logs
from servinglib.monitoring.logs import configure_logging
from servinglib.monitoring.metrics import ServingMetrics, multiprocess_dir
from servinglib.serving.service import InferenceService
from servinglib.serving.watchdog import Watchdog
from servinglib.shadow.router import ShadowRouter

__all__ = ["Worker", "build_worker", "load_worker"]

log = logging.getLogger("servinglib.serving.assembly")


@dataclass(frozen=True)
class Worker:
    """What one worker process serves with.

    ``close`` flushes background work in order (rollout watcher, queued requests, shadow
    copies, prediction log); gunicorn's ``worker_exit`` hook calls it.
    """

    config: ServiceConfig
    service: InferenceService
    metrics: ServingMetrics
    close: Callable[[], None]
    watchdog: Watchdog | None = None

    def is_live(self) -> bool:
        """False once the watchdog retired the worker (a wedged version, too much memory)."""
        return self.watchdog is None or self.watchdog.live


def build_worker(
    config: ServiceConfig,
    rollout_dir: Path | None = None,
    retire: Callable[[], None] | None = None,
) -> Worker:
    """Load and self-test every model version of ``config`` and wire the observers.

    Args:
        config: the loaded servinglib.yaml.
        rollout_dir: the admin API's desired-state directory; when given, the worker
            converges to it before it serves and then keeps watching it.
        retire: asks the process to exit gracefully (gunicorn workers send themselves
            SIGTERM); the watchdog calls it once a version is wedged or memory is too high.

    Example::

        worker = build_worker(load_config("servinglib.yaml"))
        worker.service.registry.is_ready()
        worker.close()
    """
    metrics = ServingMetrics()
    metrics.declare_shadow_pairs(config)
    caller = LaneCaller(listener=metrics, threads=config.server.threads)
    registry = ModelRegistry(config, listener=metrics, caller=caller)
    logger = None
    if config.prediction_log is not None:
        logger = open_logs(config.prediction_log, config.service, metrics)
    shadows = ShadowRouter(registry, listener=metrics, recorder=logger)
    drift = DriftMonitor(registry, multiprocess_dir(), on_issue=metrics.data_quality_issue)
    metrics.add_collector(drift)
    service = InferenceService(
        registry,
        listener=metrics,
        recorder=logger,
        shadows=shadows,
        batch_listener=metrics,
        drift=drift,
    )
    caller.bind(service)  # composed models call their steps through the service's lanes
    registry.load_all()
    if not registry.is_ready():
        log.warning(
            "worker %d started NOT READY: a default version failed; see /models", os.getpid()
        )
    shadows.run_on = service.call_version  # shadow copies use the version's own threads
    shadows.wait_ready()  # isolation: process loads the shadow versions alongside
    watcher = None
    if rollout_dir is not None:  # admin API enabled: converge to the operator's state first
        watcher = RolloutWatcher(registry, rollout_dir, on_unload=service.release)
        watcher.sync()
        watcher.start()
    watchdog = Watchdog(
        service,
        config.server.watchdog_margin_s,
        listener=metrics,
        on_wedged=retire,
        max_rss_bytes=config.server.max_rss_mb << 20,
    )
    watchdog.start()

    def close() -> None:
        watchdog.stop()
        if watcher is not None:
            watcher.stop()
        service.close()  # queued requests first: their answers feed shadows and the log
        caller.close()
        shadows.close()
        drift.close()
        if logger is not None:
            logger.close()

    return Worker(config, service, metrics, close, watchdog)


def load_worker(
    path: str | os.PathLike[str],
    rollout_dir: Path | None = None,
    retire: Callable[[], None] | None = None,
) -> Worker:
    """:func:`build_worker` for the config file at ``path``, with its log level applied."""
    config = load_config(path)
    configure_logging(config.server.log_level, config.server.log_format)
    return build_worker(config, rollout_dir, retire)
