"""The methods of a gRPC service, bound to a servicer, with lenient request parsing.

A request message that is not valid protobuf becomes :class:`Malformed` rather than a
failure of the server, and is refused with INVALID_ARGUMENT naming the message (on a
stream, that request's answer carries the error and the stream goes on).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from servinglib.grpc_front.rpc import Method

__all__ = ["SERVICE_NAME", "Malformed", "method_table"]

SERVICE_NAME = "inference.GRPCInferenceService"


@dataclass(frozen=True)
class Malformed:
    """A request message that could not be parsed, and why."""

    reason: str


def _lenient(message: Any) -> Callable[[bytes], Any]:
    name = message.DESCRIPTOR.name

    def parse(data: bytes) -> Any:
        try:
            return message.FromString(data)
        except DecodeError as e:
            return Malformed(f"the {name} message is not valid protobuf ({e}); check the client")

    return parse


def _checked(method: Callable[[Any, Any], Any], streaming: bool) -> Callable[[Any, Any], Any]:
    """``method``, refusing a :class:`Malformed` request with INVALID_ARGUMENT."""

    async def handle(request: Any, context: Any) -> Any:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
        return await method(request, context)

    async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
        async for answer in method(request, context):
            yield answer

    return stream if streaming else handle


def method_table(
    servicer: Any, messages: Any, service: str, infer_methods: frozenset[str] = frozenset()
) -> dict[str, Method]:
    """Every RPC of ``service`` (``package.Service``, defined in the generated module
    ``messages``), by path, bound to ``servicer``'s method of the same name.

    ``infer_methods``: the RPCs that take :class:`Malformed` requests themselves (they
    answer them like any refused inference, counted and logged).
    """
    descriptor = messages.DESCRIPTOR.services_by_name[service.rsplit(".", 1)[-1]]
    table: dict[str, Method] = {}
    for method in descriptor.methods:
        request = getattr(messages, method.input_type.name)
        response = getattr(messages, method.output_type.name)
        behaviour = getattr(servicer, method.name, None)
        if behaviour is None:  # an RPC newer than the servicer: UNIMPLEMENTED, as unknown
            continue
        if method.name not in infer_methods and not method.client_streaming:
            behaviour = _checked(behaviour, method.server_streaming)
        table[f"/{service}/{method.name}"] = Method(
            behaviour,
            _lenient(request),
            response.SerializeToString,
            client_streaming=method.client_streaming,
            server_streaming=method.server_streaming,
        )
    return table
