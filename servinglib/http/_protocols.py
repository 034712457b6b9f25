"""The two inference protocols, as the exchange sees them: which bodies they take, how a
body becomes an :class:`InferenceRequest`, and how a prediction becomes a body.

* ``POST /infer``: the LyftLearn-style JSON protocol;
* ``POST /v2/models/<m>[/versions/<v>]/infer``: Open Inference (KServe V2 / Triton REST),
  JSON or with the binary tensor extension.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from servinglib.config.spec import ServerConfig
from servinglib.errors import InvalidInputError, NonFiniteOutputError, PredictionError
from servinglib.http._payload import request_priority
from servinglib.http.errors import HttpError
from servinglib.serving.lanes import Lane
from servinglib.serving.service import InferenceRequest, Prediction
from servinglib.wire import jsonbytes
from servinglib.wire.strict_json import parse_json
from servinglib.wire.v2 import InferRequest, decode_request
from servinglib.wire.v2_framing import HEADER_LENGTH as BINARY_HEADER_LENGTH
from servinglib.wire.v2_framing import json_header_length
from servinglib.wire.v2_response import encode_response

__all__ = ["HEADER_LENGTH", "Encoded", "Head", "InferProtocol", "JsonProtocol", "V2Protocol"]

HEADER_LENGTH = BINARY_HEADER_LENGTH.lower()  # how the exchange looks headers up
_ALLOWED_KEYS = frozenset({"model_id", "version", "features", "priority"})

Header = Callable[[str], str | None]  # a request header by lower-case name


class Head(Protocol):
    """What a protocol may read of a request besides its body (the exchange provides it)."""

    request_id: str
    timeout_ms: float | None
    waited_s: float
    trace: Any  # the request's OpenTelemetry context (None when not traced)

    def header(self, name: str) -> str | None:
        """A request header by lower-case name."""

    def routing_key(self, model: str) -> str | None:
        """The value of ``model``'s routing header."""

    def lane(self, model: str) -> Lane | None:
        """The lane of ``model`` (None for an unknown model), looked up once per request."""


@dataclass(frozen=True)
class Encoded:
    """A response body, its content type and any protocol header."""

    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


class JsonProtocol:
    """What the exchange asks of a protocol (this base reads JSON bodies only)."""

    name = ""
    compresses = False  # answers honour Accept-Encoding (gzip, deflate)

    def check_content_type(self, mimetype: str, header: Header) -> None:
        """Refuse a body the protocol cannot read (415), before it is read."""
        if mimetype and mimetype != "application/json" and not mimetype.endswith("+json"):
            raise HttpError(
                415, f"content type {mimetype!r} is not supported here; send application/json"
            )

    def parse(
        self, raw: bytes, model: str | None, version: str | None, head: Head
    ) -> tuple[InferenceRequest, Any]:
        """The service request and what :meth:`encode` needs to know of the request."""
        raise TypeError(f"{type(self).__name__} does not parse requests")

    def encode(self, prediction: Prediction, context: Any, request_id: str) -> Encoded:
        """The body answering ``prediction``."""
        raise TypeError(f"{type(self).__name__} does not encode answers")


class InferProtocol(JsonProtocol):
    """``POST /infer``: ``{"model_id", "version"?, "features", "priority"?}``."""

    name = "infer"

    def __init__(self, server: ServerConfig) -> None:
        self._max_depth = server.max_json_depth

    def parse(
        self, raw: bytes, model: str | None, version: str | None, head: Head
    ) -> tuple[InferenceRequest, Any]:
        """Check an /infer body.

        Raises:
            InvalidInputError: naming the key that is wrong.
        """
        body = parse_json(raw, self._max_depth)
        if not isinstance(body, dict):
            raise InvalidInputError(
                'the body must be a JSON object: {"model_id": ..., "features": ...}'
            )
        model = body.get("model_id")
        if model is None and "inputs" in body:
            raise InvalidInputError(
                "this looks like an Open Inference (v2) request (it has `inputs`, no "
                "`model_id`): send it to POST /v2/models/{model}/infer, or send "
                '{"model_id": ..., "features": ...} to /infer',
                field="model_id",
            )
        if not isinstance(model, str):
            raise InvalidInputError("`model_id` is required and must be a string", field="model_id")
        version = body.get("version")
        if version is not None and not isinstance(version, str):
            raise InvalidInputError('`version` must be a string, e.g. "2"', field="version")
        if "features" not in body:
            raise InvalidInputError("`features` is required", field="features")
        unknown = sorted(body.keys() - _ALLOWED_KEYS)
        if unknown:
            raise InvalidInputError(
                f"unknown key(s) {unknown}; allowed: model_id, version, features, priority",
                field=unknown[0],
            )
        request = InferenceRequest(
            model,
            body["features"],
            version,
            tensors=False,
            request_id=head.request_id,
            routing_key=head.routing_key(model),
            lane=head.lane(model),
            timeout_ms=head.timeout_ms,
            waited_s=head.waited_s,
            trace=head.trace,
            priority=request_priority(body.get("priority")),
        )
        return request, None

    def encode(self, prediction: Prediction, context: Any, request_id: str) -> Encoded:
        """``{"model_id", "version", "output", "request_id"}``."""
        payload = {
            "model_id": prediction.model,
            "version": prediction.version,
            "output": prediction.output,
            "request_id": request_id,
        }
        try:
            return Encoded(jsonbytes.dumps(payload))
        except (TypeError, ValueError) as e:
            raise _unencodable(prediction, "JSON cannot carry", e) from e


class V2Protocol(JsonProtocol):
    """Open Inference ``infer``: JSON tensors, or a JSON header followed by binary tensors."""

    name = "v2"
    compresses = True  # Triton compresses answers as Accept-Encoding asks

    def __init__(self, server: ServerConfig) -> None:
        self._max_depth = server.max_json_depth
        self._max_elements = server.max_tensor_elements

    def check_content_type(self, mimetype: str, header: Header) -> None:
        """Any content type: ``Inference-Header-Content-Length`` alone says JSON or binary.

        That is Triton's rule; aiohttp (``tritonclient.http.aio``) labels JSON bodies
        ``application/octet-stream`` and some clients send no type at all.
        """

    def parse(
        self, raw: bytes, model: str | None, version: str | None, head: Head
    ) -> tuple[InferenceRequest, Any]:
        """Decode the tensors (the model and version come from the path).

        Raises:
            InvalidInputError: the body does not follow the protocol; the message says where.
        """
        assert model is not None  # the path names it
        try:
            decoded = decode_request(
                raw,
                json_header_length(head.header(HEADER_LENGTH)),
                max_elements=self._max_elements,
                max_depth=self._max_depth,
            )
        except InvalidInputError as e:
            if b'"features"' in raw or b'"model_id"' in raw:
                raise InvalidInputError(
                    f"{e}; this looks like an /infer request (it has `model_id` or "
                    "`features`): send it to POST /infer, or send Open Inference `inputs` here",
                    field=e.field,
                ) from e
            raise
        request = InferenceRequest(
            model,
            decoded.inputs,
            version,
            tensors=True,
            # The prediction log keys on the x-request-id the response carries; the body's
            # ``id`` is only echoed in the answer.
            request_id=head.request_id,
            routing_key=head.routing_key(model),
            lane=head.lane(model),
            timeout_ms=head.timeout_ms,
            waited_s=head.waited_s,
            trace=head.trace,
            priority=request_priority(decoded.parameters.get("priority")),
        )
        return request, decoded

    def encode(self, prediction: Prediction, context: Any, request_id: str) -> Encoded:
        """The output tensors, each as JSON data or binary as the request asked."""
        decoded: InferRequest = context
        try:
            if not isinstance(prediction.output, dict):
                raise TypeError(
                    f"predict() returned {type(prediction.output).__name__}, not a dict"
                )
            payload, json_length = encode_response(
                prediction.model,
                version=prediction.version,
                request_id=decoded.id,
                outputs=prediction.output,
                requested=decoded.outputs,
                binary_default=decoded.binary_output_default,
            )
        except (TypeError, ValueError) as e:
            raise _unencodable(
                prediction,
                "the v2 protocol cannot carry (predict() must return a dict of tensor name -> "
                "array-like)",
                e,
            ) from e
        if json_length is None:
            return Encoded(payload)
        return Encoded(
            payload,
            "application/octet-stream",
            ((BINARY_HEADER_LENGTH, str(json_length)),),
        )


def _unencodable(prediction: Prediction, what: str, error: Exception) -> PredictionError:
    kind = NonFiniteOutputError if isinstance(error, jsonbytes.NonFiniteError) else PredictionError
    return kind.logged(prediction.model, prediction.version, f"returned an output {what}", error)
