"""Open Inference Protocol v2 (KServe / Triton REST), including the binary tensor extension."""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from importlib.metadata import version as package_version

from flask import Blueprint, Response, current_app, g, jsonify, request

from servinglib.errors import InvalidInputError, PredictionError
from servinglib.http._content_coding import (
    ContentCodingError,
    decode_body,
    encode_body,
    response_coding,
)
from servinglib.http._context import mark_inference
from servinglib.http._payload import envoy_timeout_ms, json_body, model_label, request_priority
from servinglib.http._triton_config import splits_rows, tensor_metadata, triton_model_config
from servinglib.http._v2_codec import InferRequest, decode_request, encode_response
from servinglib.http._v2_framing import HEADER_LENGTH, json_header_length
from servinglib.http._v2_rows import split_rows, stack_rows
from servinglib.http.errors import error_response
from servinglib.registry import VersionState
from servinglib.service import InferenceService, Prediction, run_followups

__all__ = ["HEADER_LENGTH", "v2_blueprint"]

v2_blueprint = Blueprint("v2", __name__, url_prefix="/v2")
log = logging.getLogger("servinglib.http")

EXTENSIONS = ["binary_tensor_data", "model_configuration"]


def _service() -> InferenceService:
    service: InferenceService = current_app.extensions["servinglib.service"]
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
    """Liveness: the process answers; never depends on models.

    The body is ``{"live": true}`` as KServe's SDK reads it (``response.json()["live"]``).
    """
    return jsonify(live=True)


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
    service = _service()
    record = service.registry.get(model, version)
    assert record.instance is not None
    ready_versions = [
        r.version for r in service.registry.records(model) if r.state is VersionState.READY
    ]
    rows = splits_rows(record.instance.inputs, service.registry.model_config(model).batching)
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
    record = _service().registry.record(model, version)
    return _empty(200 if record.state is VersionState.READY else 400)


@v2_blueprint.get("/models/<model>/config")
@v2_blueprint.get("/models/<model>/versions/<version>/config")
def model_config(model: str, version: str | None = None) -> Response:
    """Triton model configuration JSON, so Triton's client tools can drive the model."""
    service = _service()
    record = service.registry.get(model, version)
    assert record.instance is not None
    return jsonify(
        triton_model_config(
            model,
            record.instance,
            record.instance.inputs,
            record.instance.outputs,
            service.registry.model_config(model).batching,
            [r.version for r in service.registry.records(model)],
            service.registry.default_version(model),
        )
    )


@v2_blueprint.post("/models/<model>/infer")
@v2_blueprint.post("/models/<model>/versions/<version>/infer")
def model_infer(model: str, version: str | None = None) -> Response:
    """Run an inference request with JSON or binary tensors."""
    service = _service()
    mark_inference("v2", model_label(service, model))
    service.registry.record(model, version)  # unknown model or version: 404 before parsing
    # Any content type: Inference-Header-Content-Length alone says JSON or binary (Triton).
    header_length = json_header_length(request.headers.get(HEADER_LENGTH))
    try:
        body = decode_body(
            request.get_data(cache=True),
            request.headers.get("Content-Encoding"),
            current_app.config["MAX_CONTENT_LENGTH"],
        )
    except ContentCodingError as e:
        return error_response(str(e), e.status)
    decoded = decode_request(
        body,
        header_length,
        max_elements=current_app.config["SERVINGLIB_MAX_TENSOR_ELEMENTS"],
        max_depth=current_app.config["SERVINGLIB_MAX_JSON_DEPTH"],
    )
    followups: list[Callable[[], None]] = []
    prediction = _predict(service, model, version, decoded, followups)
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
    coding = response_coding(request.headers.get("Accept-Encoding"))
    if coding is not None:
        response.set_data(encode_body(payload, coding))
        response.headers["Content-Encoding"] = coding
    response.vary.add("Accept-Encoding")
    response.call_on_close(lambda: run_followups(followups))  # shadows start after the answer
    return response


def _predict(
    service: InferenceService,
    model: str,
    version: str | None,
    decoded: InferRequest,
    followups: list[Callable[[], None]],
) -> Prediction:
    """Call the model; a request with an added batch dimension is answered row by row."""
    priority = request_priority(decoded.parameters.get("priority"))
    call = functools.partial(
        service.infer_tensors,
        model,
        version=version,
        request_id=decoded.id or g.request_id,
        routing_key=request.headers.get(service.routing_header(model)),
        timeout_ms=envoy_timeout_ms(
            request.environ, current_app.config["SERVINGLIB_DEADLINE_MARGIN_MS"]
        ),
        priority=priority,
        after_response=followups,
    )
    record = service.registry.get(model, version)
    assert record.instance is not None
    batching = service.registry.model_config(model).batching
    rows = None
    if batching is not None and splits_rows(record.instance.inputs, batching):
        rows = split_rows(decoded.inputs, record.instance.inputs, batching.max_batch_size)
    if rows is None:
        return call(decoded.inputs)
    answers = [call(row) for row in rows]
    try:
        stacked = stack_rows([answer.output for answer in answers])
    except TypeError as e:
        error_id = uuid.uuid4().hex[:12]
        log.error("model %r rows cannot be stacked (error id %s)", model, error_id, exc_info=e)
        raise PredictionError(model, answers[0].version, error_id) from e
    first = answers[0]
    return Prediction(first.model, first.version, stacked, sum(a.latency_s for a in answers))


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


def _platform(instance: object) -> str:
    platform = getattr(instance, "platform", "")
    return platform if isinstance(platform, str) and platform else "servinglib_python"
