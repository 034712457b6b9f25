"""Per-request bookkeeping shared by every route: request id and the JSON access log.

Inference requests are recorded by the exchange (:mod:`servinglib.http._exchange`); the
Flask routes (probes, metadata, metrics) get theirs through :mod:`servinglib.http.flask_glue`.
Nothing here knows Flask: the gRPC front end and the event-loop worker use it too.
"""

from __future__ import annotations

import logging
import random
import re

__all__ = [
    "REQUEST_ID_HEADER",
    "VERSION_HEADER",
    "log_request",
    "request_id_from",
]

REQUEST_ID_HEADER = "x-request-id"
VERSION_HEADER = "x-servinglib-model-version"
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

access_log = logging.getLogger("servinglib.access")


def request_id_from(incoming: str | None) -> str:
    """The caller's x-request-id when it is safe to echo, else a new one."""
    if incoming and _SAFE_REQUEST_ID.match(incoming):
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
    """One JSON access-log line per request.

    The record is built directly (no caller lookup: every line comes from here), which
    halves the request thread's share of the cost.
    """
    if not access_log.isEnabledFor(logging.INFO):
        return
    record = logging.LogRecord(
        "servinglib.access", logging.INFO, __file__, 0, "%s %s %d", (method, path, status), None
    )
    record.__dict__.update(
        event="request",
        request_id=request_id,
        method=method,
        path=path,
        status=status,
        duration_ms=round(elapsed * 1000, 3),
        model=model,
        version=version,
        protocol=protocol,
    )
    access_log.handle(record)
