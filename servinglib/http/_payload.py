"""Reading request bodies: content type, JSON parsing, metric-safe model labels."""

from __future__ import annotations

import json
from typing import Any

from flask import request
from werkzeug.exceptions import UnsupportedMediaType

from servinglib.errors import InvalidInputError
from servinglib.service import InferenceService

__all__ = [
    "ENVOY_TIMEOUT_HEADER",
    "envoy_timeout_ms",
    "json_body",
    "model_label",
    "require_json_content_type",
]

ENVOY_TIMEOUT_HEADER = "x-envoy-expected-rq-timeout-ms"


def require_json_content_type() -> None:
    """Refuse bodies declared as something other than JSON (415); no header means JSON."""
    mimetype = request.mimetype
    if mimetype and mimetype != "application/json" and not mimetype.endswith("+json"):
        raise UnsupportedMediaType(
            f"content type {mimetype!r} is not supported here; send application/json"
        )


def json_body() -> Any:
    """The request body parsed as JSON (400 naming the parse error otherwise)."""
    raw = request.get_data(cache=True)
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InvalidInputError(f"request body is not valid JSON: {e}") from e


def envoy_timeout_ms() -> float | None:
    """The time Envoy will wait for this request, when Envoy sent it (else None)."""
    raw = request.headers.get(ENVOY_TIMEOUT_HEADER)
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def model_label(service: InferenceService, model: Any) -> str:
    """The model name for metrics: configured names only, so labels stay bounded."""
    return (
        model if isinstance(model, str) and model in service.registry.model_names() else "_unknown"
    )
