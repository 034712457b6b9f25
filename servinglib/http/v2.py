"""Open Inference Protocol v2 (KServe / Triton REST), including the binary tensor extension."""

from __future__ import annotations

from importlib.metadata import version as package_version

from flask import Blueprint, Response, current_app, jsonify

from servinglib.describe.triton_config import (
    combiner_config_of,
    tensor_metadata,
    triton_model_config,
)
from servinglib.errors import InvalidInputError
from servinglib.http.flask_glue import json_body, request_bytes
from servinglib.serving.service import InferenceService
from servinglib.wire.batch_rows import splits_rows

__all__ = ["v2_blueprint"]

# Inference (POST .../infer) is served by the exchange, before Flask: servinglib.http._exchange.
v2_blueprint = Blueprint("v2", __name__, url_prefix="/v2")

EXTENSIONS = ["binary_tensor_data", "model_configuration"]


def _service() -> InferenceService:
    service: InferenceService = current_app.extensions["servinglib.serving.service"]
    return service


def _empty(status: int) -> Response:
    # Model readiness is carried by the status code; the spec asks for an empty body.
    return Response(b"", status)


@v2_blueprint.get("")
def server_metadata() -> Response:
    """Server name, version and supported extensions."""
    return jsonify(name="servinglib", version=package_version("servinglib"), extensions=EXTENSIONS)


@v2_blueprint.get("/health/live")
def live() -> Response:
    """Liveness: 400 once the watchdog retired this worker (a wedged version), else 200.

    The body is ``{"live": true|false}`` as KServe's SDK reads it (``response.json()["live"]``).
    """
    live_now = bool(current_app.extensions["servinglib.liveness"]())
    response = jsonify(live=live_now)
    response.status_code = 200 if live_now else 400
    return response


@v2_blueprint.get("/health/ready")
def ready() -> Response:
    """Readiness: every model's default version is READY (4xx otherwise, per the spec).

    The body is ``{"ready": true|false}``, as KServe's SDK reads it.
    """
    ready_now = bool(current_app.extensions["servinglib.readiness"]())
    response = jsonify(ready=ready_now)
    response.status_code = 200 if ready_now else 400
    return response


@v2_blueprint.get("/models/<model>")
@v2_blueprint.get("/models/<model>/versions/<version>")
def model_metadata(model: str, version: str | None = None) -> Response:
    """Name, ready versions, platform and tensor signature of a model."""
    catalog = _service().catalog
    record = catalog.ready(model, version)
    ready_versions = [v.version for v in catalog.views(model) if v.ready]
    rows = splits_rows(record.instance.inputs, catalog.model_config(model).batching)
    return jsonify(
        name=model,
        versions=ready_versions,
        platform=_platform(record.instance),
        inputs=[tensor_metadata(spec, rows) for spec in record.instance.inputs],
        outputs=[tensor_metadata(spec, rows) for spec in record.instance.outputs],
    )


@v2_blueprint.get("/models/<model>/ready")
@v2_blueprint.get("/models/<model>/versions/<version>/ready")
def model_ready(model: str, version: str | None = None) -> Response:
    """200 when that version (default: the default version) is READY, else 400."""
    return _empty(200 if _service().catalog.view(model, version).ready else 400)


@v2_blueprint.get("/models/<model>/config")
@v2_blueprint.get("/models/<model>/versions/<version>/config")
def model_config(model: str, version: str | None = None) -> Response:
    """Triton model configuration JSON, so Triton's client tools can drive the model.

    ``<ensemble>_combiner`` is the combiner step of an ensemble's scheduling: Triton's tools
    (perf_analyzer) read the configuration of every step.
    """
    service = _service()
    catalog = service.catalog
    combiner = combiner_config_of(
        model, service.models, lambda base: catalog.ready(base, version).instance
    )
    if combiner is not None:
        return jsonify(combiner)
    record = catalog.ready(model, version)
    settings = catalog.model_config(model)
    config = triton_model_config(
        model,
        record.instance,
        record.instance.inputs,
        record.instance.outputs,
        settings.batching,
        [v.version for v in catalog.views(model)],
        catalog.default_version(model),
        settings.input_schema,
    )
    return jsonify(config)


@v2_blueprint.post("/repository/index")
def repository_index() -> Response:
    """Every model version with its state and, when not READY, the reason (Triton shape)."""
    options = json_body() if request_bytes().strip() else {}
    if not isinstance(options, dict) or not isinstance(options.get("ready", False), bool):
        raise InvalidInputError('the body must be an object like {"ready": true}')
    ready_only = options.get("ready") is True
    catalog = _service().catalog
    entries = [
        {"name": name, **view.listing()}
        for name in catalog.model_names()
        for view in catalog.views(name)
        if view.ready or not ready_only
    ]
    return jsonify(entries)


def _platform(instance: object) -> str:
    platform = getattr(instance, "platform", "")
    return platform if isinstance(platform, str) and platform else "servinglib_python"
