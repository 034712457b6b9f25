"""Open Inference Protocol v2 (KServe / Triton REST), including the binary tensor extension."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from importlib.metadata import version as package_version
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, request
from werkzeug.exceptions import UnsupportedMediaType

from servinglib.errors import InvalidInputError, PredictionError
from servinglib.http._context import mark_inference
from servinglib.http._payload import envoy_timeout_ms, json_body, model_label, request_priority
from servinglib.http._v2_codec import decode_request, encode_response
from servinglib.model import TensorSpec
from servinglib.registry import VersionState
from servinglib.service import InferenceService, run_followups

__all__ = ["HEADER_LENGTH", "v2_blueprint"]

v2_blueprint = Blueprint("v2", __name__, url_prefix="/v2")
log = logging.getLogger("servinglib.http")

HEADER_LENGTH = "Inference-Header-Content-Length"
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
    """Liveness: the process answers; never depends on models."""
    return _empty(200)


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
    assert record.instance is not None
    ready_versions = [
        r.version for r in service.registry.records(model) if r.state is VersionState.READY
    ]
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
    return _empty(200 if record.state is VersionState.READY else 400)


@v2_blueprint.get("/models/<model>/config")
@v2_blueprint.get("/models/<model>/versions/<version>/config")
def model_config(model: str, version: str | None = None) -> Response:
    """Triton model configuration JSON, so Triton's client tools can drive the model."""
    service = _service()
    record = service.registry.get(model, version)
    assert record.instance is not None
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


@v2_blueprint.post("/models/<model>/infer")
@v2_blueprint.post("/models/<model>/versions/<version>/infer")
def model_infer(model: str, version: str | None = None) -> Response:
    """Run an inference request with JSON or binary tensors."""
    service = _service()
    mark_inference("v2", model_label(service, model))
    service.registry.record(model, version)  # unknown model or version: 404 before parsing
    header_length = _header_length()
    mimetype = request.mimetype
    if header_length is None and mimetype and mimetype != "application/json":
        raise UnsupportedMediaType(
            f"content type {mimetype!r} needs the {HEADER_LENGTH} header (binary tensor "
            "extension); send application/json otherwise"
        )
    decoded = decode_request(
        request.get_data(cache=True),
        header_length,
        max_elements=current_app.config["SERVINGLIB_MAX_TENSOR_ELEMENTS"],
        max_depth=current_app.config["SERVINGLIB_MAX_JSON_DEPTH"],
    )
    priority = request_priority(decoded.parameters.get("priority"))
    followups: list[Callable[[], None]] = []
    prediction = service.infer_tensors(
        model,
        decoded.inputs,
        version,
        request_id=decoded.id or g.request_id,
        routing_key=request.headers.get(service.routing_header(model)),
        timeout_ms=envoy_timeout_ms(request.environ),
        priority=priority,
        after_response=followups,
    )
    g.version = prediction.version
    try:
        if not isinstance(prediction.output, dict):
            raise TypeError(f"predict() returned {type(prediction.output).__name__}, not a dict")
        payload, json_length = encode_response(
            model,
            version=prediction.version,
            request_id=decoded.id,
            outputs=prediction.output,
            requested=decoded.outputs,
            binary_default=decoded.binary_output_default,
        )
    except (TypeError, ValueError) as e:
        error_id = uuid.uuid4().hex[:12]
        log.error(
            "model %r version %r returned an output the v2 protocol cannot carry (error id %s): "
            "predict() must return a dict of tensor name -> array-like",
            model,
            prediction.version,
            error_id,
            exc_info=e,
        )
        raise PredictionError(model, prediction.version, error_id) from e
    if json_length is None:
        response = Response(payload, 200, mimetype="application/json")
    else:
        response = Response(payload, 200, mimetype="application/octet-stream")
        response.headers[HEADER_LENGTH] = str(json_length)
    response.call_on_close(lambda: run_followups(followups))  # shadows start after the answer
    return response


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
            if ready_only and record.state is not VersionState.READY:
                continue
            entry = {"name": name, "version": record.version, "state": record.state.value}
            if record.reason:
                entry["reason"] = record.reason
            entries.append(entry)
    return jsonify(entries)


def _header_length() -> int | None:
    raw = request.headers.get(HEADER_LENGTH)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidInputError(f"{HEADER_LENGTH} must be an integer, got {raw!r}") from None


def _platform(instance: object) -> str:
    platform = getattr(instance, "platform", "")
    return platform if isinstance(platform, str) and platform else "servinglib_python"


def _tensor_metadata(spec: TensorSpec) -> dict[str, Any]:
    return {"name": spec.name, "datatype": spec.datatype, "shape": list(spec.shape)}


def _triton_tensor(spec: TensorSpec) -> dict[str, Any]:
    data_type = _TRITON_TYPES.get(spec.datatype, f"TYPE_{spec.datatype}")
    return {"name": spec.name, "data_type": data_type, "dims": list(spec.shape)}
