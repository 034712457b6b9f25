"""InferenceService: route a decoded request to the right model version and call it.

Per request: pick the version (explicit > traffic split > default), validate the input
once, call the model, then hand the answer to the observers (score metrics, prediction
log) and the shadow router. Everything after the model call is non-blocking.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import jsonschema
import numpy as np

from servinglib.errors import InvalidInputError, ModelNotReadyError, PredictionError
from servinglib.model import TensorSpec
from servinglib.registry import ModelRegistry, VersionRecord
from servinglib.routing import TrafficSplit

__all__ = [
    "InferenceService",
    "Prediction",
    "PredictionRecorder",
    "ServiceListener",
    "ShadowSubmitter",
]

log = logging.getLogger("servinglib.service")


@dataclass(frozen=True)
class Prediction:
    """What a model answered, which version answered it, and how long it took."""

    model: str
    version: str
    output: Any
    latency_s: float = 0.0


class ServiceListener(Protocol):
    """Told about answers and rejected inputs; the metrics layer implements it."""

    def prediction_made(self, model: str, version: str, output: Any) -> None:
        """A version answered (score monitoring)."""

    def input_rejected(self, model: str, field: str) -> None:
        """The input of a request failed validation at ``field``."""


class PredictionRecorder(Protocol):
    """The prediction log, as the service sees it."""

    def sampled(self) -> bool:
        """Whether this request is logged."""

    def record_prediction(
        self, request_id: str, model: str, version: str, features: Any, output: Any, seconds: float
    ) -> None:
        """Queue one record (never blocks)."""


class ShadowSubmitter(Protocol):
    """The shadow router, as the service sees it."""

    enabled: bool

    def submit(self, model: str, primary: str, features: Any, output: Any, request_id: str) -> None:
        """Copy an answered request to the model's shadows (never blocks)."""


class InferenceService:
    """Pick the version, validate the input once, call the model, report failures safely.

    Example::

        service = InferenceService(registry)
        service.infer("eta", {"distance_km": 2.0}).output
    """

    def __init__(
        self,
        registry: ModelRegistry,
        listener: ServiceListener | None = None,
        recorder: PredictionRecorder | None = None,
        shadows: ShadowSubmitter | None = None,
    ) -> None:
        self.registry = registry
        self._listener = listener
        self._recorder = recorder
        self._shadows = shadows if shadows is not None and shadows.enabled else None
        self._validators: dict[str, jsonschema.protocols.Validator] = {}
        self._splits: dict[str, TrafficSplit] = {}
        self._properties: dict[str, set[str]] = {}
        for name in registry.model_names():
            config = registry.model_config(name)
            if config.input_schema is not None:
                self._validators[name] = jsonschema.Draft202012Validator(config.input_schema)
                self._properties[name] = set(config.input_schema.get("properties", {}))
            if config.traffic:
                self._splits[name] = TrafficSplit(name, config.traffic)

    def route(self, model: str, version: str | None, routing_key: str | None) -> VersionRecord:
        """The READY version that answers: explicit, else the traffic split, else the default.

        A split version that is not READY falls back to the default version.
        """
        if version is not None:
            return self.registry.get(model, version)
        split = self._splits.get(model)
        if split is None:
            return self.registry.get(model)
        chosen = split.choose(routing_key)
        try:
            return self.registry.get(model, chosen)
        except ModelNotReadyError:
            log.warning(
                "model %r: traffic version %r is not READY; using the default", model, chosen
            )
            return self.registry.get(model)

    def routing_key_of(self, model: str, header_value: str | None, features: Any) -> str | None:
        """The sticky routing key of a request: the configured feature, else the header."""
        feature = self.registry.model_config(model).routing_feature
        if feature is not None:
            value = features.get(feature) if isinstance(features, Mapping) else None
            return None if value is None else str(to_key(value))
        return header_value

    def routing_header(self, model: str) -> str:
        """The header carrying the routing key of ``model`` (lower case)."""
        return self.registry.model_config(model).routing_header

    def infer(
        self,
        model: str,
        features: Any,
        version: str | None = None,
        *,
        request_id: str = "",
        routing_key: str | None = None,
    ) -> Prediction:
        """Answer a LyftLearn-style request: ``features`` checked against ``input_schema``.

        Raises:
            ModelNotFoundError, VersionNotFoundError, ModelNotReadyError: routing failed.
            InvalidInputError: the features break the model's input schema.
            PredictionError: the model raised; details are logged under its error id.
        """
        record = self.route(model, version, self.routing_key_of(model, routing_key, features))
        validator = self._validators.get(model)
        if validator is not None:
            error = jsonschema.exceptions.best_match(validator.iter_errors(features))
            if error is not None:
                path = [str(p) for p in error.absolute_path]
                field = path[0] if path else "features"
                self._rejected(model, field)
                where = "features." + ".".join(path) if path else "features"
                raise InvalidInputError(f"{where}: {error.message}", field=field)
        return self._call(record, features, request_id)

    def infer_tensors(
        self,
        model: str,
        tensors: Mapping[str, np.ndarray],
        version: str | None = None,
        *,
        request_id: str = "",
        routing_key: str | None = None,
    ) -> Prediction:
        """Answer an Open Inference request: tensors checked against the model's declared inputs."""
        record = self.route(model, version, routing_key)
        assert record.instance is not None  # READY implies loaded
        try:
            _check_tensors(model, record.instance.inputs, tensors)
        except InvalidInputError as e:
            self._rejected(model, e.field or "inputs", record)
            raise
        return self._call(record, dict(tensors), request_id)

    def _rejected(self, model: str, field: str, record: VersionRecord | None = None) -> None:
        """Count a rejected input; fields outside the schema or tensor names become ``_other``."""
        if self._listener is None:
            return
        known = {"features", "inputs"} | self._properties.get(model, set())
        if record is not None and record.instance is not None:
            known |= {spec.name for spec in record.instance.inputs}
        self._listener.input_rejected(model, field if field in known else "_other")

    def _call(self, record: VersionRecord, features: Any, request_id: str) -> Prediction:
        assert record.instance is not None
        started = time.perf_counter()
        try:
            output = record.instance.predict(features)
        except InvalidInputError as e:
            self._rejected(record.model, e.field or "features", record)
            raise  # the model rejected its input on purpose: a 400, not a model failure
        except Exception as e:
            error_id = uuid.uuid4().hex[:12]
            log.error(
                "model %r version %r raised while predicting (error id %s)",
                record.model,
                record.version,
                error_id,
                exc_info=True,
            )
            raise PredictionError(record.model, record.version, error_id) from e
        elapsed = time.perf_counter() - started
        if self._listener:
            self._listener.prediction_made(record.model, record.version, output)
        if self._recorder is not None and self._recorder.sampled():
            self._recorder.record_prediction(
                request_id, record.model, record.version, features, output, elapsed
            )
        if self._shadows is not None:
            self._shadows.submit(record.model, record.version, features, output, request_id)
        return Prediction(record.model, record.version, output, elapsed)


def to_key(value: Any) -> str:
    """A stable string for a routing-key feature value."""
    return value if isinstance(value, str) else repr(value)


def _check_tensors(
    model: str, specs: tuple[TensorSpec, ...] | Any, tensors: Mapping[str, np.ndarray]
) -> None:
    if not specs:
        return
    declared = {spec.name: spec for spec in specs}
    unknown = sorted(set(tensors) - set(declared))
    if unknown:
        raise InvalidInputError(
            f"model {model!r} has no input(s) {unknown}; its inputs are {sorted(declared)}",
            field=unknown[0],
        )
    missing = sorted(set(declared) - set(tensors))
    if missing:
        raise InvalidInputError(f"model {model!r} needs input(s) {missing}", field=missing[0])
    for name, spec in declared.items():
        shape = tensors[name].shape
        if not spec.accepts(shape):
            raise InvalidInputError(
                f"input {name!r} of model {model!r} has shape {list(shape)}; expected "
                f"{list(spec.shape)} (-1 = any size)",
                field=name,
            )
