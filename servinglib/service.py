"""InferenceService: route a decoded request to the right model version and call it."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
import numpy as np

from servinglib.errors import InvalidInputError, PredictionError
from servinglib.model import TensorSpec
from servinglib.registry import ModelRegistry, VersionRecord

__all__ = ["InferenceService", "Prediction"]

log = logging.getLogger("servinglib.service")


@dataclass(frozen=True)
class Prediction:
    """What a model answered, and which version answered it."""

    model: str
    version: str
    output: Any


class InferenceService:
    """Pick the version, validate the input once, call the model, report failures safely.

    Example::

        service = InferenceService(registry)
        service.infer("eta", {"distance_km": 2.0}).output
    """

    def __init__(self, registry: ModelRegistry) -> None:
        self.registry = registry
        self._validators: dict[str, jsonschema.protocols.Validator] = {}
        for name in registry.model_names():
            schema = registry.model_config(name).input_schema
            if schema is not None:
                self._validators[name] = jsonschema.Draft202012Validator(schema)

    def infer(self, model: str, features: Any, version: str | None = None) -> Prediction:
        """Answer a LyftLearn-style request: ``features`` checked against ``input_schema``.

        Raises:
            ModelNotFoundError, VersionNotFoundError, ModelNotReadyError: routing failed.
            InvalidInputError: the features break the model's input schema.
            PredictionError: the model raised; details are logged under its error id.
        """
        record = self.registry.get(model, version)
        validator = self._validators.get(model)
        if validator is not None:
            error = jsonschema.exceptions.best_match(validator.iter_errors(features))
            if error is not None:
                field = ".".join(str(p) for p in error.absolute_path) or "features"
                raise InvalidInputError(
                    f"features.{field}: {error.message}"
                    if field != "features"
                    else f"features: {error.message}",
                    field=field,
                )
        return self._call(record, features)

    def infer_tensors(
        self, model: str, tensors: Mapping[str, np.ndarray], version: str | None = None
    ) -> Prediction:
        """Answer an Open Inference request: tensors checked against the model's declared inputs."""
        record = self.registry.get(model, version)
        assert record.instance is not None  # READY implies loaded
        _check_tensors(model, record.instance.inputs, tensors)
        return self._call(record, dict(tensors))

    @staticmethod
    def _call(record: VersionRecord, features: Any) -> Prediction:
        assert record.instance is not None
        try:
            output = record.instance.predict(features)
        except InvalidInputError:
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
        return Prediction(record.model, record.version, output)


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
