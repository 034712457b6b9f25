"""``POST /infer``: the LyftLearn-style JSON protocol."""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint, Response, current_app, g, request

from servinglib.errors import InvalidInputError
from servinglib.http._context import mark_inference
from servinglib.http._payload import (
    envoy_timeout_ms,
    json_body,
    model_label,
    request_priority,
    require_json_content_type,
)
from servinglib.selftest import to_plain
from servinglib.service import InferenceService

__all__ = ["infer_blueprint"]

infer_blueprint = Blueprint("infer", __name__)


@infer_blueprint.post("/infer")
def infer() -> Response:
    """Answer ``{"model_id", "version"?, "features"}`` with the model's output."""
    service: InferenceService = current_app.extensions["servinglib.service"]
    mark_inference("infer", "_unknown")  # counted even when the body cannot be read
    require_json_content_type()
    body = json_body()
    if not isinstance(body, dict):
        raise InvalidInputError(
            'the body must be a JSON object: {"model_id": ..., "features": ...}'
        )
    model = body.get("model_id")
    g.model = model_label(service, model)
    if not isinstance(model, str):
        raise InvalidInputError("`model_id` is required and must be a string", field="model_id")
    version = body.get("version")
    if version is not None and not isinstance(version, str):
        raise InvalidInputError('`version` must be a string, e.g. "2"', field="version")
    if "features" not in body:
        raise InvalidInputError("`features` is required", field="features")
    unknown = sorted(set(body) - {"model_id", "version", "features", "priority"})
    if unknown:
        raise InvalidInputError(
            f"unknown key(s) {unknown}; allowed: model_id, version, features, priority",
            field=unknown[0],
        )
    priority = request_priority(body.get("priority"))
    routing_key = request.headers.get(service.routing_header(model))
    prediction = service.infer(
        model,
        body["features"],
        version,
        request_id=g.request_id,
        routing_key=routing_key,
        timeout_ms=envoy_timeout_ms(),
        priority=priority,
    )
    g.version = prediction.version
    payload: dict[str, Any] = {
        "model_id": prediction.model,
        "version": prediction.version,
        "output": to_plain(prediction.output),
        "request_id": g.request_id,
    }
    return Response(json.dumps(payload, allow_nan=False), 200, mimetype="application/json")
