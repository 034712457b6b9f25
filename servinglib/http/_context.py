"""Per-request bookkeeping: request id, in-flight gauge, metrics and the JSON access log."""

from __future__ import annotations

import logging
import re
import time
import uuid

from flask import Flask, Response, g, request

from servinglib.http.errors import OUTCOMES
from servinglib.monitoring.metrics import ServingMetrics

__all__ = ["REQUEST_ID_HEADER", "VERSION_HEADER", "install_request_context", "mark_inference"]

REQUEST_ID_HEADER = "x-request-id"
VERSION_HEADER = "x-servinglib-model-version"
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

access_log = logging.getLogger("servinglib.access")


def mark_inference(protocol: str, model: str, version: str = "") -> None:
    """Tell the request context this request is an inference on ``model`` (for metrics)."""
    g.protocol = protocol
    g.model = model
    g.version = version
    if not getattr(g, "in_flight_counted", False):
        g.in_flight_counted = True
        g.metrics.in_flight_gauge(protocol).inc()


def install_request_context(app: Flask, metrics: ServingMetrics) -> None:
    """Attach request-id handling, metrics and access logging to ``app``."""

    @app.before_request
    def _start() -> None:
        g.started = time.perf_counter()
        g.metrics = metrics
        incoming = request.headers.get(REQUEST_ID_HEADER, "")
        g.request_id = incoming if _SAFE_REQUEST_ID.match(incoming) else uuid.uuid4().hex

    @app.after_request
    def _finish(response: Response) -> Response:
        elapsed = time.perf_counter() - g.get("started", time.perf_counter())
        request_id = g.get("request_id", "")
        response.headers[REQUEST_ID_HEADER] = request_id
        protocol = g.get("protocol")
        version = g.get("version", "")
        if version:
            response.headers[VERSION_HEADER] = version
        if protocol:
            outcome = g.get("outcome") or OUTCOMES.get(response.status_code, "server_error")
            if response.status_code == 500 and g.get("unexpected_error"):
                outcome = "server_error"
            metrics.observe_request(g.model, version, protocol, outcome, elapsed)
        access_log.info(
            "%s %s %d",
            request.method,
            request.path,
            response.status_code,
            extra={
                "event": "request",
                "request_id": request_id,
                "method": request.method,
                "path": request.path,
                "status": response.status_code,
                "duration_ms": round(elapsed * 1000, 3),
                "model": g.get("model", ""),
                "version": version,
                "protocol": protocol or "",
            },
        )
        return response

    @app.teardown_request
    def _teardown(_error: BaseException | None) -> None:
        if g.get("in_flight_counted"):
            metrics.in_flight_gauge(g.protocol).dec()
            g.in_flight_counted = False
