"""Open Inference Protocol v2 (KServe / Triton REST), including the binary tensor extension."""

from __future__ import annotations

from importlib.metadata import version as package_version
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from servinglib.errors import InvalidInputError
from servinglib.http._payload import json_body
from servinglib.model import TensorSpec
from servinglib.service import InferenceService

__all__ = ["v2_blueprint"]

# Inference (POST .../infer) is served by the exchange, before Flask: servinglib.http._exchange.
v2_blueprint = Blueprint("v2", __name__, url_prefix="/v2")

EXTENSIONS = ["binary_tensor_data", "model_configuration"]

_TRITON_TYPES = {"BYTES": "TYPE_STRING"}


def _service() -> InferenceService:
    service: InferenceService = current_app.extensions["servinglib.service"]
    return service


def _empty(status: int) -> Response:
    # Health answers are carried by the status code; the spec asks for an empty body.
    return Response(b"", status)


@v2_blueprint.get("")
def server_metadata() -> Response:
    """Server name, version and supported extensions."""
    return jsonify(name="servinglib", version=package_version("servinglib"), extensions=EXTENSIONS)


@v2_blueprint.get("/health/live")
def live() -> Response:
    """Liveness: 400 once the watchdog retired this worker (a wedged version), else 200."""
    return _empty(200 if current_app.extensions["servinglib.liveness"]() else 400)


@v2_blueprint.get("/health/ready")
def ready() -> Response:
    """Readiness: every model's default version is READY (4xx otherwise, per the spec)."""
    return _empty(200 if current_app.extensions["servinglib.readiness"]() else 400)


@v2_blueprint.get("/models/<model>")
@v2_blueprint.get("/models/<model>/versions/<version>")
def model_metadata(model: str, version: str | None = None) -> Response:
    """Name, ready versions, platform and tensor signature of a model."""
    service = _service()
    record = service.registry.get(model, version)
    ready_versions = [r.version for r in service.registry.records(model) if r.ready is not None]
    return jsonify(
        name=model,
        versions=ready_versions,
        platform=_platform(record.instance),
        inputs=[_tensor_metadata(spec) for spec in record.instance.inputs],
        outputs=[_tensor_metadata(spec) for spec in record.instance.outputs],
    )


@v2_blueprint.get("/models/<model>/ready")
@v2_blueprint.get("/models/<model>/versions/<version>/ready")
def model_ready(model: str, version: str | None = None) -> Response:
    """200 when that version (default: the default version) is READY, else 400."""
    record = _service().registry.record(model, version)
    return _empty(200 if record.ready is not None else 400)


@v2_blueprint.get("/models/<model>/config")
@v2_blueprint.get("/models/<model>/versions/<version>/config")
def model_config(model: str, version: str | None = None) -> Response:
    """Triton model configuration JSON, so Triton's client tools can drive the model."""
    service = _service()
    record = service.registry.get(model, version)
    versions = [r.version for r in service.registry.records(model)]
    policy: dict[str, Any] = (
        {"specific": {"versions": [int(v) for v in versions]}}
        if all(v.isdigit() for v in versions)
        else {"all": {}}
    )
    return jsonify(
        name=model,
        platform="",
        backend="python",
        max_batch_size=0,
        input=[_triton_tensor(spec) for spec in record.instance.inputs],
        output=[_triton_tensor(spec) for spec in record.instance.outputs],
        version_policy=policy,
        instance_group=[{"name": model, "kind": "KIND_CPU", "count": 1}],
        parameters={
            "servinglib_default_version": {"string_value": service.registry.default_version(model)}
        },
    )


@v2_blueprint.post("/repository/index")
def repository_index() -> Response:
    """Every model version with its state and, when not READY, the reason (Triton shape)."""
    options = json_body() if request.get_data(cache=True).strip() else {}
    if not isinstance(options, dict) or not isinstance(options.get("ready", False), bool):
        raise InvalidInputError('the body must be an object like {"ready": true}')
    ready_only = options.get("ready") is True
    registry = _service().registry
    entries = []
    for name in registry.model_names():
        for record in registry.records(name):
            if ready_only and record.ready is None:
                continue
            entry = {"name": name, "version": record.version, "state": record.state.value}
            if record.reason:
                entry["reason"] = record.reason
            entries.append(entry)
    return jsonify(entries)


def _platform(instance: object) -> str:
    platform = getattr(instance, "platform", "")
    return platform if isinstance(platform, str) and platform else "servinglib_python"


def _tensor_metadata(spec: TensorSpec) -> dict[str, Any]:
    return {"name": spec.name, "datatype": spec.datatype, "shape": list(spec.shape)}


def _triton_tensor(spec: TensorSpec) -> dict[str, Any]:
    data_type = _TRITON_TYPES.get(spec.datatype, f"TYPE_{spec.datatype}")
    return {"name": spec.name, "data_type": data_type, "dims": list(spec.shape)}
