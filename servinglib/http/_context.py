"""Per-request bookkeeping: request id, in-flight gauge, metrics and the JSON access log."""

from __future__ import annotations

import logging
import random
import re
import time
from typing import Any

from flask import Flask, Response, g, request

from servinglib.http.errors import OUTCOMES
from servinglib.monitoring.metrics import ServingMetrics

__all__ = [
    "REQUEST_ID_HEADER",
    "VERSION_HEADER",
    "install_request_context",
    "log_request",
    "mark_inference",
    "request_id_from",
]

REQUEST_ID_HEADER = "x-request-id"
VERSION_HEADER = "x-servinglib-model-version"
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

access_log = logging.getLogger("servinglib.access")


def request_id_from(environ: dict[str, Any]) -> str:
    """The caller's x-request-id when it is safe to echo, else a new one."""
    incoming: str = environ.get("HTTP_X_REQUEST_ID", "")
    if _SAFE_REQUEST_ID.match(incoming):
        return incoming
    # 128 random bits like uuid4().hex, without a system call per request (the generator
    # is reseeded in every forked worker); request ids need uniqueness, not secrecy.
    return f"{random.getrandbits(128):032x}"


def log_request(
    request_id: str,
    method: str,
    path: str,
    status: int,
    elapsed: float,
    model: str,
    version: str,
    protocol: str,
) -> None:
    """One JSON access-log line per request."""
    if not access_log.isEnabledFor(logging.INFO):
        return
    access_log.info(
        "%s %s %d",
        method,
        path,
        status,
        extra={
            "event": "request",
            "request_id": request_id,
            "method": method,
            "path": path,
            "status": status,
            "duration_ms": round(elapsed * 1000, 3),
            "model": model,
            "version": version,
            "protocol": protocol,
        },
    )


def mark_inference(protocol: str, model: str, version: str = "") -> None:
    """Tell the request context this request is an inference on ``model`` (for metrics)."""
    state = g._get_current_object()  # one proxy lookup, not one per attribute
    state.protocol = protocol
    state.model = model
    state.version = version
    if not getattr(state, "in_flight_counted", False):
        state.in_flight_counted = True
        state.metrics.in_flight_gauge(protocol).inc()


def install_request_context(app: Flask, metrics: ServingMetrics) -> None:
    """Attach request-id handling, metrics and access logging to ``app``."""

    @app.before_request
    def _start() -> None:
        state = g._get_current_object()
        state.started = time.perf_counter()
        state.metrics = metrics
        state.request_id = request_id_from(request.environ)

    @app.after_request
    def _finish(response: Response) -> Response:
        state = g._get_current_object()
        elapsed = time.perf_counter() - getattr(state, "started", time.perf_counter())
        request_id = getattr(state, "request_id", "")
        headers = response.headers
        headers[REQUEST_ID_HEADER] = request_id
        protocol = getattr(state, "protocol", None)
        version = getattr(state, "version", "")
        status = response.status_code
        if version:
            headers[VERSION_HEADER] = version
        if protocol:
            outcome = getattr(state, "outcome", None) or OUTCOMES.get(status, "server_error")
            if status == 500 and getattr(state, "unexpected_error", False):
                outcome = "server_error"
            metrics.observe_request(state.model, version, protocol, outcome, elapsed)
        environ = request.environ
        log_request(
            request_id,
            environ["REQUEST_METHOD"],
            environ.get("PATH_INFO", ""),
            status,
            elapsed,
            getattr(state, "model", ""),
            version,
            protocol or "",
        )
        return response

    @app.teardown_request
    def _teardown(_error: BaseException | None) -> None:
        state = g._get_current_object()
        if getattr(state, "in_flight_counted", False):
            metrics.in_flight_gauge(state.protocol).dec()
            state.in_flight_counted = False
