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


def envoy_timeout_ms(raw: str | None, margin_ms: float = 0.0) -> float | None:
    """The time this request may take, when Envoy sent it (``raw``: its header's value).

    That is Envoy's ``x-envoy-expected-rq-timeout-ms`` less ``margin_ms``
    (``server.deadline_margin_ms``): the server's JSON 504 must reach Envoy before Envoy's
    own timer fires, or Envoy discards it and sends its own. At least 1 ms is left, so a
    request whose margin is spent is refused at once with a 504. None without the header.
    """
    try:
        budget = float(raw) if raw is not None else None
    except ValueError:
        return None
    if budget is None or budget <= 0:
        return None  # Envoy sends 0 when the route has no timeout
    return max(1.0, budget - margin_ms)


def request_priority(value: Any) -> int | None:
    """A request priority: an integer >= 0 (0 is served first), or None for the default."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInputError("priority must be an integer >= 0 (0 = highest)", field="priority")
    return value
