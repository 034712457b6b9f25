"""Errors as gRPC statuses: the HTTP answer :func:`~servinglib.http.errors.describe` gives,
translated, so an error reads the same over gRPC as over REST.

=========================================  ====  ===================
error                                      HTTP  gRPC
=========================================  ====  ===================
bad input, unsupported request             400   INVALID_ARGUMENT
unknown model or version                   404   NOT_FOUND
body over ``server.max_request_body_bytes`` 413   RESOURCE_EXHAUSTED
queue full (shed), model not ready         503   UNAVAILABLE
deadline passed                            504   DEADLINE_EXCEEDED
the model raised, anything unexpected      500   INTERNAL (with an error id)
=========================================  ====  ===================

A shed request's status carries ``retry-after`` (seconds) and ``grpc-retry-pushback-ms``
in its trailing metadata, as the REST answer carries ``Retry-After``.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import orjson

from servinglib.http.errors import describe

__all__ = ["GrpcStatus", "grpc_status"]

_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    404: grpc.StatusCode.NOT_FOUND,
    405: grpc.StatusCode.UNIMPLEMENTED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    415: grpc.StatusCode.INVALID_ARGUMENT,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


@dataclass(frozen=True)
class GrpcStatus:
    """How an error is answered over gRPC, and what REST would have said (for the logs).

    ``shed``: refused for a full queue (the caller pauses before answering, as REST does).
    """

    code: grpc.StatusCode
    message: str
    trailers: tuple[tuple[str, str], ...]
    http_status: int
    outcome: str
    version: str
    shed: bool


def grpc_status(error: BaseException) -> GrpcStatus:
    """The status answering ``error`` (an unexpected one is logged under an error id)."""
    described = describe(error)
    message = str(orjson.loads(described.body)["error"])
    code = _CODES.get(described.status, grpc.StatusCode.INTERNAL)
    trailers: tuple[tuple[str, str], ...] = ()
    for name, value in described.headers:
        if name.lower() == "retry-after":
            trailers = (("retry-after", value), ("grpc-retry-pushback-ms", str(int(value) * 1000)))
    return GrpcStatus(
        code,
        message,
        trailers,
        described.status,
        described.outcome,
        described.version,
        described.outcome == "shed",
    )
