"""The application factories: the inference exchange in front of Flask's other routes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify, request

from servinglib.config.spec import ModelConfig, ServerConfig
from servinglib.describe.openapi import openapi_document
from servinglib.http._exchange import Endpoints
from servinglib.http._payload import check_transfer_coding
from servinglib.http.asgi import AsgiFrontEnd
from servinglib.http.drift import drift_blueprint
from servinglib.http.flask_glue import install_request_context, register_error_handlers
from servinglib.http.status import status_blueprint
from servinglib.http.v2 import v2_blueprint
from servinglib.http.wsgi import WsgiFrontEnd
from servinglib.lifecycle.rollout_state import load_state
from servinglib.monitoring.metrics import ServingMetrics
from servinglib.serving.service import InferenceService

__all__ = ["ServingApp", "create_app", "create_asgi_app"]

ServingApp = Flask  # what create_app returns, named for callers that never import Flask

ops_blueprint = Blueprint("ops", __name__)


@ops_blueprint.get("/livez")
def livez() -> Response:
    """Kubernetes liveness: 503 once the watchdog retired this worker (a wedged version)."""
    if current_app.extensions["servinglib.liveness"]():
        return jsonify(status="alive")
    response = jsonify(status="not live", wedged=[list(v) for v in _service().wedged()])
    response.status_code = 503
    return response


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
    """Prometheus text format (OpenMetrics, with exemplars, when the Accept header asks
    for it), aggregated over all gunicorn workers."""
    accept = request.headers.get("Accept", "")
    body, content_type = current_app.extensions["servinglib.metrics"].render(accept)
    return Response(body, 200, content_type=content_type)


@ops_blueprint.get("/openapi.json")
def openapi() -> Response:
    """OpenAPI 3.1 description of every public endpoint and each model's input schema."""
    catalog = _service().catalog
    declared = {
        name: {
            v.version: catalog.ready(name, v.version).instance
            for v in catalog.views(name)
            if v.ready
        }
        for name in catalog.model_names()
    }
    return jsonify(openapi_document(catalog.config, declared))


def _service() -> InferenceService:
    service: InferenceService = current_app.extensions["servinglib.serving.service"]
    return service


def _refuse_transfer_codings() -> None:
    check_transfer_coding(request.headers.get("Transfer-Encoding"))


def rollout_summary(model: ModelConfig) -> dict[str, Any]:
    """``{"rollout": ...}``: where the model's rollout stands and its gates' evidence."""
    if model.rollout is None:
        return {}
    try:
        state = load_state(model.rollout.state_dir, model.name)
    except (OSError, ValueError, TypeError):
        state = None  # being replaced, or unreadable: the next call sees it
    if state is None or state.candidate != model.rollout.candidate:
        return {"rollout": {"candidate": model.rollout.candidate, "status": "pending"}}
    return {"rollout": state.summary()}


def _model_states() -> list[dict[str, Any]]:
    catalog = _service().catalog
    sync = catalog.store_sync()  # URL repositories: the master's store sync
    return [
        {
            "name": name,
            "default_version": catalog.default_version(name),
            "versions": [view.listing() for view in catalog.views(name)],
            **({"sync": sync[name]} if name in sync else {}),
        }
        | rollout_summary(catalog.model_config(name))
        for name in catalog.model_names()
    ]


def create_app(
    service: InferenceService,
    metrics: ServingMetrics,
    server: ServerConfig | None = None,
    readiness: Callable[[], bool] | None = None,
    shutdown: Callable[[], None] | None = None,
    liveness: Callable[[], bool] | None = None,
) -> Flask:
    """Build the WSGI app around an already-loaded :class:`InferenceService`.

    Inference requests go through the exchange (:class:`servinglib.http.wsgi.WsgiFrontEnd`
    in front of Flask); every other route is a Flask view.

    Args:
        service: routes requests to models.
        metrics: the process's metrics owner.
        server: limits such as the request body size.
        readiness: overrides the readiness check.
        liveness: the liveness check (the worker's watchdog); always live without it.
        shutdown: flushes background work (shadow copies, prediction log); gunicorn's
            ``worker_exit`` hook calls it as ``app.extensions["servinglib.shutdown"]()``
            when the app runs under a stock gunicorn worker.
    """
    server = server or ServerConfig()
    app = _flask_app(service, metrics, server, readiness, shutdown, liveness)
    app.wsgi_app = WsgiFrontEnd(  # type: ignore[method-assign]
        Endpoints(service, metrics, server), app.wsgi_app
    )
    return app


def create_asgi_app(
    service: InferenceService,
    metrics: ServingMetrics,
    server: ServerConfig,
    close_when: Callable[[], bool] | None = None,
    readiness: Callable[[], bool] | None = None,
    liveness: Callable[[], bool] | None = None,
) -> AsgiFrontEnd:
    """Build the event-loop app: the inference routes on the loop, the rest in Flask threads.

    ``close_when`` is asked before each answer; True adds ``Connection: close``.
    """
    flask_app = _flask_app(service, metrics, server, readiness, None, liveness)
    return AsgiFrontEnd(
        Endpoints(service, metrics, server), flask_app, server.threads, close_when=close_when
    )


def _flask_app(
    service: InferenceService,
    metrics: ServingMetrics,
    server: ServerConfig,
    readiness: Callable[[], bool] | None,
    shutdown: Callable[[], None] | None,
    liveness: Callable[[], bool] | None,
) -> Flask:
    app = Flask("servinglib")
    # No redirects: Werkzeug would answer "//readyz" or "/models/" with a 308 whose Location
    # comes from the client's Host header. Those paths are 404s (JSON) instead.
    app.url_map.merge_slashes = False
    app.config["MAX_CONTENT_LENGTH"] = server.max_request_body_bytes
    app.config["SERVINGLIB_MAX_JSON_DEPTH"] = server.max_json_depth
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["servinglib.serving.service"] = service
    app.extensions["servinglib.metrics"] = metrics
    app.extensions["servinglib.readiness"] = readiness or service.is_ready
    app.extensions["servinglib.liveness"] = liveness or (lambda: True)
    app.extensions["servinglib.shutdown"] = shutdown or (lambda: None)
    install_request_context(app)
    app.before_request(_refuse_transfer_codings)
    register_error_handlers(app)
    app.register_blueprint(v2_blueprint)
    app.register_blueprint(ops_blueprint)
    app.register_blueprint(drift_blueprint)
    if server.status_page:
        app.register_blueprint(status_blueprint)
    return app
