"""The Flask application factory: protocols, probes, metrics and error handling in one app."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify

from servinglib.config import ServerConfig, ServiceConfig, load_config
from servinglib.http._context import install_request_context
from servinglib.http.drift import drift_blueprint, drift_monitor
from servinglib.http.errors import register_error_handlers
from servinglib.http.infer import InferEndpoint
from servinglib.http.openapi import openapi_document
from servinglib.http.v2 import v2_blueprint
from servinglib.monitoring.logs import configure_logging
from servinglib.monitoring.metrics import ServingMetrics
from servinglib.monitoring.prediction_log import PredictionLogger, open_sink
from servinglib.registry import ModelRegistry
from servinglib.rollout import RolloutWatcher
from servinglib.service import InferenceService
from servinglib.shadow import ShadowRouter

__all__ = ["create_app", "create_app_from_config"]

log = logging.getLogger("servinglib.http")

ops_blueprint = Blueprint("ops", __name__)


@ops_blueprint.get("/livez")
def livez() -> Response:
    """Kubernetes liveness: the worker answers; never depends on models."""
    return jsonify(status="alive")


@ops_blueprint.get("/readyz")
def readyz() -> Response:
    """Kubernetes readiness: 200 when every default version is READY, else 503 with details."""
    ready = current_app.extensions["servinglib.readiness"]()
    response = jsonify(status="ready" if ready else "not ready", models=_model_states())
    response.status_code = 200 if ready else 503
    return response


@ops_blueprint.get("/models")
def models() -> Response:
    """Every model, its default version and each version's state and failure reason."""
    return jsonify(models=_model_states())


@ops_blueprint.get("/metrics")
def metrics() -> Response:
    """Prometheus text format, aggregated over all gunicorn workers."""
    body, content_type = current_app.extensions["servinglib.metrics"].render()
    return Response(body, 200, content_type=content_type)


@ops_blueprint.get("/openapi.json")
def openapi() -> Response:
    """OpenAPI 3.1 description of every public endpoint and each model's input schema."""
    service: InferenceService = current_app.extensions["servinglib.service"]
    return jsonify(openapi_document(service.registry.config))


def _model_states() -> list[dict[str, Any]]:
    registry = current_app.extensions["servinglib.service"].registry
    out = []
    for name in registry.model_names():
        versions = []
        for record in registry.records(name):
            entry: dict[str, Any] = {"version": record.version, "state": record.state.value}
            if record.reason:
                entry["reason"] = record.reason
            versions.append(entry)
        out.append(
            {"name": name, "default_version": registry.default_version(name), "versions": versions}
        )
    return out


def create_app(
    service: InferenceService,
    metrics: ServingMetrics,
    server: ServerConfig | None = None,
    readiness: Callable[[], bool] | None = None,
    shutdown: Callable[[], None] | None = None,
) -> Flask:
    """Build the WSGI app around an already-loaded :class:`InferenceService`.

    Args:
        service: routes requests to models.
        metrics: the process's metrics owner.
        server: limits such as the request body size.
        readiness: overrides the readiness check.
        shutdown: flushes background work (shadow copies, prediction log); gunicorn's
            ``worker_exit`` hook calls it as ``app.extensions["servinglib.shutdown"]()``.
    """
    server = server or ServerConfig()
    app = Flask("servinglib")
    app.config["MAX_CONTENT_LENGTH"] = server.max_request_body_bytes
    app.config["SERVINGLIB_MAX_JSON_DEPTH"] = server.max_json_depth
    app.config["SERVINGLIB_MAX_TENSOR_ELEMENTS"] = server.max_tensor_elements
    app.config["SERVINGLIB_DEADLINE_MARGIN_MS"] = server.deadline_margin_ms
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["servinglib.service"] = service
    app.extensions["servinglib.metrics"] = metrics
    app.extensions["servinglib.readiness"] = readiness or service.registry.is_ready
    app.extensions["servinglib.shutdown"] = shutdown or (lambda: None)
    install_request_context(app, metrics)
    register_error_handlers(app)
    app.register_blueprint(v2_blueprint)
    app.register_blueprint(ops_blueprint)
    app.register_blueprint(drift_blueprint)
    endpoint = InferEndpoint(app.wsgi_app, service, metrics, server)
    app.extensions["servinglib.infer_endpoint"] = endpoint  # the asyncio front end uses it
    app.wsgi_app = endpoint  # type: ignore[method-assign]
    return app


def create_app_from_config(path: str | os.PathLike[str]) -> Flask:
    """Load the config, load and self-test every model version, and build the app.

    Called in each gunicorn worker after fork: ONNX Runtime and torch sessions are not
    fork-safe, so models must never be loaded in the master.
    """
    config: ServiceConfig = load_config(path)
    configure_logging(config.server.log_level, config.server.log_format)
    metrics = ServingMetrics(score_buckets=config.score_buckets)
    metrics.declare_shadow_pairs(config)
    registry = ModelRegistry(config, listener=metrics)
    registry.load_all()
    if not registry.is_ready():
        log.warning(
            "worker %d started NOT READY: a default version failed; see /models", os.getpid()
        )
    logger = None
    if config.prediction_log is not None:
        logger = PredictionLogger(
            config.prediction_log,
            open_sink(config.prediction_log.url),
            on_dropped=metrics.prediction_log_dropped,
            on_written=metrics.prediction_log_written,
        )
    shadows = ShadowRouter(registry, listener=metrics, recorder=logger)
    service = InferenceService(
        registry,
        listener=metrics,
        recorder=logger,
        shadows=shadows,
        batch_listener=metrics,
        drift=drift_monitor(registry, metrics),
    )

    watcher = None
    rollout_dir = os.environ.get("SERVINGLIB_ROLLOUT_DIR")
    if rollout_dir:  # admin API enabled: converge to the operator's desired state first
        watcher = RolloutWatcher(registry, Path(rollout_dir), on_unload=service.release)
        watcher.sync()
        watcher.start()

    def shutdown() -> None:
        if watcher is not None:
            watcher.stop()
        service.close()  # queued requests first: their answers feed shadows and the log
        shadows.close()
        if logger is not None:
            logger.close()

    return create_app(service, metrics, config.server, shutdown=shutdown)
