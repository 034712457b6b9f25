"""The method handlers of ``inference.GRPCInferenceService``, with lenient request parsing.

grpcio answers a request its deserializer cannot parse with INTERNAL, as if the server had
failed. Here a message that is not valid protobuf becomes :class:`Malformed` instead, and
is refused with INVALID_ARGUMENT naming the message (on a stream, that request's answer
carries the error and the stream goes on).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from servinglib.grpc_front.proto import inference_pb2 as pb

__all__ = ["SERVICE_NAME", "Malformed", "method_handlers"]

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


def _checked(method: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    async def handle(request: Any, context: Any) -> Any:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
        return await method(request, context)

    return handle


def method_handlers(servicer: Any, infer_methods: frozenset[str]) -> dict[str, Any]:
    """Every RPC of the service, bound to ``servicer``'s method of the same name.

    ``infer_methods``: the RPCs that take :class:`Malformed` requests themselves (they
    answer them like any refused inference, counted and logged).
    """
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    handlers: dict[str, Any] = {}
    for method in service.methods:
        request = getattr(pb, method.input_type.name)
        response = getattr(pb, method.output_type.name)
        behaviour = getattr(servicer, method.name)
        kwargs = {
            "request_deserializer": _lenient(request),
            "response_serializer": response.SerializeToString,
        }
        if method.client_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(behaviour, **kwargs)
        elif method.name in infer_methods:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(behaviour, **kwargs)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _checked(behaviour), **kwargs
            )
    return handlers
