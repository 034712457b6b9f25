"""One ``ModelInfer`` call, from its request message to the recorded answer.

The same steps as a REST request (:mod:`servinglib.http._exchange`)::

    decode -> admit and call (the service) -> encode -> record

The request becomes the service's :class:`~servinglib.serving.service.InferenceRequest` and goes
through the same admission, lanes, batching, deadline, shadows, prediction log and drift
monitor; it is counted in the same metrics with ``protocol="grpc"`` and logged in the same
access log. The caller's deadline is the gRPC deadline (``grpc-timeout``) or Envoy's
``x-envoy-expected-rq-timeout-ms``, whichever is shorter, less ``server.deadline_margin_ms``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from servinglib.config.spec import ServerConfig
from servinglib.errors import InvalidInputError, PredictionError
from servinglib.grpc_front.handlers import Malformed
from servinglib.grpc_front.status import GrpcStatus, grpc_status
from servinglib.grpc_front.tensors import decode_infer, encode_infer
from servinglib.http._context import REQUEST_ID_HEADER, log_request, request_id_from
from servinglib.http._payload import ENVOY_TIMEOUT_HEADER, envoy_timeout_ms, request_priority
from servinglib.monitoring.metrics import ServingMetrics
from servinglib.serving import tracing
from servinglib.serving.service import InferenceRequest, InferenceService, Prediction
from servinglib.wire.v2 import InferRequest

__all__ = ["PROTOCOL", "Answer", "InferCalls"]

PROTOCOL = "grpc"
INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"


@dataclass
class Answer:
    """A ``ModelInferResponse``, or the status refusing the request; and the deferred work."""

    response: Any = None
    status: GrpcStatus | None = None
    request_id: str = ""
    version: str = ""
    followups: list[Callable[[], None]] = field(default_factory=list)


class InferCalls:
    """Answers ``ModelInferRequest`` messages through the service.

    Example::

        calls = InferCalls(service, metrics, ServerConfig())
        answer = await calls.infer(request, metadata, context.time_remaining())
    """

    def __init__(
        self, service: InferenceService, metrics: ServingMetrics, server: ServerConfig
    ) -> None:
        self.service = service
        self._metrics = metrics
        self._in_flight = metrics.in_flight_gauge(PROTOCOL)
        self._max_elements = server.max_tensor_elements
        self._margin_ms = server.deadline_margin_ms

    async def infer(
        self, request: Any, metadata: Iterable[tuple[str, Any]], remaining_s: float | None
    ) -> Answer:
        """Answer one request (never raises: a failure is the answer's ``status``).

        ``metadata``: the call's invocation metadata; ``remaining_s``: the time left until
        the call's gRPC deadline (None without one).
        """
        started = time.perf_counter()
        self._in_flight.inc()
        headers = {key: value for key, value in metadata if isinstance(value, str)}
        answer = Answer(request_id=request_id_from(headers.get(REQUEST_ID_HEADER)))
        model = getattr(request, "model_name", "")
        label = model if model in self.service.models else "_unknown"
        outcome, status = "success", 200
        span = trace = None
        if tracing.ACTIVE is not None:  # gRPC metadata keys are lower case, as HTTP/2's
            span, trace = tracing.ACTIVE.start_request(headers.get, INFER_PATH, PROTOCOL)
        try:
            if isinstance(request, Malformed):
                raise InvalidInputError(request.reason)
            call, decoded = self._request(request, headers, remaining_s, answer.request_id)
            if trace is not None:
                call = dataclasses.replace(call, trace=trace)
            prediction = await self.service.infer_async(call, answer.followups)
            answer.version = prediction.version
            answer.response = _encoded(prediction, decoded)
        except Exception as e:
            answer.status = grpc_status(e)
            answer.response = None
            outcome, status = answer.status.outcome, answer.status.http_status
            answer.version = answer.status.version or answer.version
        finally:
            self._in_flight.dec()
        elapsed = time.perf_counter() - started
        name = "" if label == "_unknown" else label
        trace_id = ""
        if span is not None and tracing.ACTIVE is not None:
            trace_id = tracing.ACTIVE.trace_id(trace)
            tracing.ACTIVE.finish_request(span, status, name, answer.version, answer.request_id)
        self._metrics.observe_request(label, answer.version, PROTOCOL, outcome, elapsed, trace_id)
        log_request(
            answer.request_id,
            "POST",
            INFER_PATH,
            status,
            elapsed,
            name,
            answer.version,
            PROTOCOL,
            trace_id,
        )
        return answer

    def _request(
        self, request: Any, headers: dict[str, str], remaining_s: float | None, request_id: str
    ) -> tuple[InferenceRequest, InferRequest]:
        """The service request of a ``ModelInferRequest``, and its decoded tensors.

        Raises:
            ModelNotFoundError, VersionNotFoundError: the request names neither.
            InvalidInputError: the tensors do not follow the protocol.
        """
        model = request.model_name
        version = request.model_version or None
        lane = self.service.lane(model)
        lane.require_version(version)
        decoded = decode_infer(request, max_elements=self._max_elements)
        call = InferenceRequest(
            model,
            decoded.inputs,
            version,
            tensors=True,
            request_id=request_id,
            routing_key=headers.get(lane.routing_header),
            timeout_ms=self._timeout_ms(headers, remaining_s),
            lane=lane,
            priority=request_priority(decoded.parameters.get("priority")),
        )
        return call, decoded

    def _timeout_ms(self, headers: dict[str, str], remaining_s: float | None) -> float | None:
        """The shorter of the gRPC deadline and Envoy's timeout, less the margin."""
        envoy = envoy_timeout_ms(headers.get(ENVOY_TIMEOUT_HEADER), self._margin_ms)
        if remaining_s is None:
            return envoy
        grpc_ms = max(1.0, remaining_s * 1000.0 - self._margin_ms)
        return grpc_ms if envoy is None else min(grpc_ms, envoy)


def _encoded(prediction: Prediction, decoded: InferRequest) -> Any:
    """The response message; an output gRPC cannot carry is the model's error."""
    try:
        if not isinstance(prediction.output, dict):
            raise TypeError(f"predict() returned {type(prediction.output).__name__}, not a dict")
        return encode_infer(prediction.model, prediction.version, prediction.output, decoded)
    except (TypeError, ValueError) as e:
        raise PredictionError.logged(
            prediction.model,
            prediction.version,
            "returned an output the Open Inference protocol cannot carry (predict() must "
            "return a dict of tensor name -> array-like)",
            e,
        ) from e
