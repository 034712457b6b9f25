"""Reading request fields every protocol shares: priority, caller's time budget, JSON."""

from __future__ import annotations

from typing import Any

from flask import current_app, request

from servinglib.errors import InvalidInputError
from servinglib.wire.strict_json import parse_json

__all__ = ["ENVOY_TIMEOUT_HEADER", "envoy_timeout_ms", "json_body", "request_priority"]

ENVOY_TIMEOUT_HEADER = "x-envoy-expected-rq-timeout-ms"


def json_body() -> Any:
    """The Flask request's body parsed as strict JSON (400 naming the problem otherwise)."""
    return parse_json(request.get_data(cache=True), current_app.config["SERVINGLIB_MAX_JSON_DEPTH"])


def envoy_timeout_ms(raw: str | None) -> float | None:
    """The time Envoy will wait for this request (its header's value), or None."""
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def request_priority(value: Any) -> int | None:
    """A request priority: an integer >= 0 (0 is served first), or None for the default."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInputError("priority must be an integer >= 0 (0 = highest)", field="priority")
    return value
