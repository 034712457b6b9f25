"""Reading request fields every protocol shares: priority, caller's time budget, JSON."""

from __future__ import annotations

from typing import Any

from servinglib.errors import InvalidInputError
from servinglib.http.errors import HttpError

__all__ = [
    "ENVOY_TIMEOUT_HEADER",
    "check_transfer_coding",
    "envoy_timeout_ms",
    "request_priority",
]

ENVOY_TIMEOUT_HEADER = "x-envoy-expected-rq-timeout-ms"


def check_transfer_coding(value: str | None) -> None:
    """Refuse every transfer coding but ``chunked`` alone (RFC 9112 section 6.1).

    A server that does not understand a coding must answer 501; servinglib decodes none
    (``Transfer-Encoding: gzip, chunked`` included), so only plain chunked bodies pass.

    Raises:
        HttpError: 501 naming the coding.
    """
    if value is None:
        return
    codings = [c.strip().lower() for c in value.split(",")]
    if codings != ["chunked"]:
        raise HttpError(
            501,
            f"Transfer-Encoding {value[:64]!r} is not supported; send the body as is, with "
            "Content-Length or Transfer-Encoding: chunked (Content-Encoding is not decoded "
            "either)",
        )


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
