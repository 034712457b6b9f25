"""The one place a loaded service is assembled from a config, for every purpose.

:func:`load_service` wires the registry, the lanes and the composition caller and loads
what its :class:`Purpose` needs: every version for a worker or ``servinglib selftest``, one
version and the models it calls for ``batch-predict`` and ``profile``. So composed models
(``pipeline:``, ``ensemble:``) load and answer the same way in each, and nothing is loaded
or self-tested twice. Both gunicorn worker classes build their :class:`Worker` here, after
fork, so every process loads its own models (ONNX Runtime and torch sessions are not
fork-safe). The HTTP layer then gets only what it serves with (the service and the
metrics), never the registry, the shadow router, the rollout watcher or the prediction log.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from servinglib.compose.calls import LaneCaller, StepListener
from servinglib.compose.order import called_models
from servinglib.config.spec import ServiceConfig, load_config
from servinglib.errors import ModelNotReadyError
from servinglib.lifecycle.registry import (
    LifecycleListener,
    ModelRegistry,
    VersionRecord,
    VersionState,
)
from servinglib.lifecycle.rollout import RolloutWatcher, read_sync_status
from servinglib.lifecycle.store import require_synced
from servinglib.model import ModelCaller
from servinglib.model_metrics import ModelMetrics
from servinglib.monitoring.drift import DriftMonitor
from servinglib.monitoring.log_fanout import open_logs
from servinglib.monitoring.logs import configure_logging
from servinglib.monitoring.metrics import ServingMetrics, multiprocess_dir
from servinglib.monitoring.model_metrics import metrics_for
from servinglib.monitoring.model_sync import ModelSyncCollector
from servinglib.serving.batching import BatchListener
from servinglib.serving.recording import AnswerRecorder
from servinglib.serving.service import (
    DriftObserver,
    InferenceService,
    ServiceListener,
    ShadowSubmitter,
)
from servinglib.serving.watchdog import Watchdog
from servinglib.shadow.router import ShadowRouter

__all__ = [
    "LoadedService",
    "Observers",
    "Purpose",
    "Worker",
    "build_worker",
    "load_service",
    "load_worker",
]

log = logging.getLogger("servinglib.serving.assembly")


class Purpose(enum.Enum):
    """What a service is loaded for, which decides what loads."""

    SERVE = "serve"  # a worker: every version (observers are wired by build_worker)
    SELFTEST = "selftest"  # `servinglib selftest`: every version, then the serving checks
    SCORE = "score"  # `batch-predict`, `profile`: one version and the models it calls


@dataclass(frozen=True)
class LoadedService:
    """A service with its versions loaded; ``close`` stops its lanes and step threads;
    ``caller`` is what its versions (and those loaded later) call other models with."""

    config: ServiceConfig
    service: InferenceService
    registry: ModelRegistry
    close: Callable[[], None]
    caller: ModelCaller | None = None

    def records(self) -> list[VersionRecord]:
        """Every version of every model, loaded or not, in the config's order."""
        return [r for name in self.registry.model_names() for r in self.registry.records(name)]

    def ready_record(self, model: str, version: str | None = None) -> VersionRecord:
        """The READY record of ``model`` ``version`` (default version when None).

        Raises:
            ModelNotReadyError: the version FAILED or was not loaded for this purpose.
        """
        record = self.registry.record(model, version)
        if record.state is not VersionState.READY:
            raise ModelNotReadyError(
                record.model, record.version, record.state.value, record.reason
            )
        return record


class _Listener(ServiceListener, LifecycleListener, StepListener, BatchListener, Protocol):
    """What observes a worker's service (its metrics)."""


@dataclass(frozen=True)
class Observers:
    """A worker's observers of its service, built once its registry exists."""

    recorder: AnswerRecorder | None = None
    shadows: ShadowSubmitter | None = None
    drift: DriftObserver | None = None


def load_service(
    config: ServiceConfig,
    purpose: Purpose,
    *,
    model: str | None = None,
    version: str | None = None,
    listener: _Listener | None = None,
    observe: Callable[[ModelRegistry], Observers] | None = None,
    model_metrics: Callable[[str, str], ModelMetrics] | None = None,
) -> LoadedService:
    """Assemble a service for ``purpose`` and load what it needs.

    Args:
        config: the loaded servinglib.yaml.
        purpose: SERVE and SELFTEST load every version; SCORE loads ``model`` ``version``
            (the default version when None) after every model it calls, each self-tested.
        listener: told about lifecycle, requests, batches and composed steps (a worker's
            metrics).
        observe: builds the service's prediction recorder, shadows and drift monitor from
            the registry (a worker's; tools observe nothing).
        model_metrics: gives each version its ``Model.metrics`` (a worker's count in
            Prometheus; tools' count nothing).

    Example::

        loaded = load_service(load_config("servinglib.yaml"), Purpose.SCORE, model="eta")
        record = loaded.ready_record("eta")
        loaded.close()
    """
    if purpose is not Purpose.SERVE:  # a worker reads the cache its master filled
        require_synced(config)
    registry = ModelRegistry(config, listener=listener, metrics=model_metrics)
    seen = observe(registry) if observe is not None else Observers()
    service = InferenceService(
        registry,
        listener=listener,
        recorder=seen.recorder,
        shadows=seen.shadows,
        batch_listener=listener,
        drift=seen.drift,
    )
    # composed models call their steps through the service's lanes
    caller = LaneCaller(service, listener=listener, threads=config.server.threads)
    if purpose is Purpose.SCORE:
        if model is None:
            raise ValueError("Purpose.SCORE loads one model: pass model=")
        record = registry.record(model, version)  # refuses an unknown model or version
        for member in called_models(config.models, model):
            for member_record in registry.records(member.name):
                registry.load_version(member, member_record, caller)
        registry.load_version(registry.model_config(model), record, caller)
    else:
        registry.load_all(caller)

    def close() -> None:
        service.close()
        caller.close()

    return LoadedService(config, service, registry, close, caller)


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
        worker.service.is_ready()
        worker.close()
    """
    metrics = ServingMetrics()
    metrics.declare_shadow_pairs(config)
    logger = None
    if config.prediction_log is not None:
        schemas = {model.name: model.input_schema for model in config.models}
        logger = open_logs(config.prediction_log, config.service, metrics, schemas)
    observed: list[tuple[ShadowRouter, DriftMonitor]] = []

    def observe(registry: ModelRegistry) -> Observers:
        shadows = ShadowRouter(registry, listener=metrics, recorder=logger)
        drift = DriftMonitor(registry, multiprocess_dir(), on_issue=metrics.data_quality_issue)
        metrics.add_collector(drift)
        observed.append((shadows, drift))
        return Observers(logger, shadows, drift)

    loaded = load_service(
        config, Purpose.SERVE, listener=metrics, observe=observe, model_metrics=metrics_for
    )
    shadows, drift = observed[0]
    service, registry = loaded.service, loaded.registry
    if not registry.is_ready():
        log.warning(
            "worker %d started NOT READY: a default version failed; see /models", os.getpid()
        )
    shadows.run_on = service.call_version  # shadow copies use the version's own threads
    shadows.wait_ready()  # isolation: process loads the shadow versions alongside
    watcher = None
    if rollout_dir is not None and any(m.repository_url for m in config.models):
        directory = rollout_dir
        registry.store_status = lambda: read_sync_status(directory)
        metrics.add_collector(ModelSyncCollector(registry.store_status))
    if rollout_dir is not None:  # admin API enabled: converge to the operator's state first
        watcher = RolloutWatcher(
            registry, rollout_dir, on_unload=service.release, caller=loaded.caller
        )
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
        loaded.close()  # queued requests first: their answers feed shadows and the log
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
