"""``GET /status`` (HTML) and ``GET /status.json`` on the public port; read-only.

Off with ``server.status_page: false``. Admin actions stay on the admin port.
"""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify, request

from servinglib.http.status_data import StatusHistory, gather_status
from servinglib.http.status_html import REFRESH_S, render_fragment, render_page

__all__ = ["status_blueprint"]

status_blueprint = Blueprint("status", __name__)

_HEADERS = {
    "Cache-Control": "no-store",
    # Inline style and script only: nothing is fetched from anywhere else.
    "Content-Security-Policy": "default-src 'self'; style-src 'unsafe-inline'; "
    "script-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}


def _status() -> dict[str, object]:
    extensions = current_app.extensions
    history = extensions.get("servinglib.status_history")
    if history is None:  # one per worker; a second one made by a race is only dropped
        history = extensions.setdefault("servinglib.status_history", StatusHistory())
    return gather_status(
        extensions["servinglib.serving.service"], extensions["servinglib.metrics"], history
    )


def _refresh_s(raw: str | None) -> int:
    if raw is None or not raw.isdigit():
        return REFRESH_S
    return min(60, max(1, int(raw)))


@status_blueprint.get("/status")
def status_page() -> Response:
    """The status page (``?fragment=1``: only the inside of ``<main>``, for the refresh;
    ``?refresh=N``: every N seconds, 1 to 60)."""
    data = _status()
    if request.args.get("fragment"):
        body = render_fragment(data)
    else:
        body = render_page(data, _refresh_s(request.args.get("refresh")))
    return Response(body, 200, mimetype="text/html", headers=_HEADERS)


@status_blueprint.get("/status.json")
def status_json() -> Response:
    """What the page shows, as JSON."""
    response = jsonify(_status())
    response.headers["Cache-Control"] = "no-store"
    return response
