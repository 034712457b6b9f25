"""InferenceService: route a decoded request to the right model version and call it.

Per request: pick the version (explicit > traffic split > default), validate the input
once, call the model, then hand the answer to the observers (score metrics, prediction
log) and the shadow router. Everything after the model call is non-blocking.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import jsonschema
import numpy as np

from servinglib.batching import BatchFunction, BatchListener, BatchPolicy, DynamicBatcher
from servinglib.errors import (
    DeadlineExceededError,
    InvalidInputError,
    ModelNotReadyError,
    OverloadedError,
    PredictionError,
    VersionNotFoundError,
)
from servinglib.model import Model, TensorSpec
from servinglib.registry import ModelRegistry, VersionRecord
from servinglib.routing import TrafficSplit

__all__ = [
    "DriftObserver",
    "InferenceService",
    "Prediction",
    "PredictionRecorder",
    "ServiceListener",
    "ShadowSubmitter",
    "run_followups",
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


class DriftObserver(Protocol):
    """Drift monitoring, as the service sees it."""

    def observe(self, model: str, version: str, features: Any, output: Any) -> None:
        """Count one answered request's features and outputs (never raises)."""


class ShadowSubmitter(Protocol):
    """The shadow router, as the service sees it."""

    enabled: bool

    def submit(
        self,
        model: str,
        primary: str,
        features: Any,
        output: Any,
        request_id: str,
        log_answer: bool = True,
    ) -> None:
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
        batch_listener: BatchListener | None = None,
        clock: Callable[[], float] = time.monotonic,
        drift: DriftObserver | None = None,
    ) -> None:
        self.registry = registry
        self.drift = drift
        self._listener = listener
        self._batch_listener = batch_listener
        self._clock = clock
        self._executors: dict[tuple[str, str, int], DynamicBatcher | None] = {}
        self._executors_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._fallbacks_logged: set[tuple[str, str]] = set()
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
        except (ModelNotReadyError, VersionNotFoundError):
            if (model, chosen) not in self._fallbacks_logged:  # once, not per request
                self._fallbacks_logged.add((model, chosen))
                log.warning(
                    "model %r: traffic version %r cannot answer; using the default", model, chosen
                )
            return self.registry.get(model)

    def routing_key_of(self, model: str, header_value: str | None, features: Any) -> str | None:
        """The sticky routing key: the configured feature when there is one, else the header.

        (Open Inference requests always use the header.)
        """
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
        timeout_ms: float | None = None,
        priority: int | None = None,
        after_response: list[Callable[[], None]] | None = None,
    ) -> Prediction:
        """Answer a LyftLearn-style request: ``features`` checked against ``input_schema``.

        With ``after_response``, work that must not delay the answer (shadow copies) is
        appended there for the caller to run once the response is sent; without it, it is
        queued at once.

        Raises:
            ModelNotFoundError, VersionNotFoundError, ModelNotReadyError: routing failed.
            InvalidInputError: the features break the model's input schema.
            OverloadedError: the version's queue is full.
            DeadlineExceededError: no answer within the deadline.
            PredictionError: the model raised; details are logged under its error id.
        """
        deadline, record = self._admit(model, features, version, routing_key, timeout_ms)
        return self._call(record, features, request_id, deadline, priority, after_response)

    def _admit(
        self,
        model: str,
        features: Any,
        version: str | None,
        routing_key: str | None,
        timeout_ms: float | None,
    ) -> tuple[float, VersionRecord]:
        """The request's deadline and the version that answers it, once its features pass."""
        deadline = self._deadline(model, timeout_ms)
        record = self.route(model, version, self.routing_key_of(model, routing_key, features))
        self._validate(model, features)
        return deadline, record

    def _validate(self, model: str, features: Any) -> None:
        """Check ``features`` against the model's ``input_schema``.

        Raises:
            InvalidInputError: naming the first failing field.
        """
        validator = self._validators.get(model)
        if validator is not None:
            error = jsonschema.exceptions.best_match(validator.iter_errors(features))
            if error is not None:
                path = [str(p) for p in error.absolute_path]
                field = path[0] if path else "features"
                self._rejected(model, field)
                where = "features." + ".".join(path) if path else "features"
                raise InvalidInputError(f"{where}: {error.message}", field=field)

    def infer_tensors(
        self,
        model: str,
        tensors: Mapping[str, np.ndarray],
        version: str | None = None,
        *,
        request_id: str = "",
        routing_key: str | None = None,
        timeout_ms: float | None = None,
        priority: int | None = None,
        after_response: list[Callable[[], None]] | None = None,
    ) -> Prediction:
        """Answer an Open Inference request: tensors checked against the model's declared inputs.

        ``after_response`` as for :meth:`infer`.
        """
        deadline = self._deadline(model, timeout_ms)
        record = self.route(model, version, routing_key)
        assert record.instance is not None  # READY implies loaded
        try:
            _check_tensors(model, record.instance.inputs, tensors)
        except InvalidInputError as e:
            self._rejected(model, e.field or "inputs", record)
            raise
        return self._call(record, dict(tensors), request_id, deadline, priority, after_response)

    def _rejected(self, model: str, field: str, record: VersionRecord | None = None) -> None:
        """Count a rejected input; fields outside the schema or tensor names become ``_other``."""
        if self._listener is None:
            return
        known = {"features", "inputs"} | self._properties.get(model, set())
        if record is not None and record.instance is not None:
            known |= {spec.name for spec in record.instance.inputs}
        self._listener.input_rejected(model, field if field in known else "_other")

    def _deadline(self, model: str, timeout_ms: float | None) -> float:
        """Absolute deadline: the model's ``deadline_ms``, or the caller's budget when shorter."""
        budget: float = self.registry.model_config(model).deadline_ms
        if timeout_ms is not None and timeout_ms > 0:
            budget = min(budget, timeout_ms)
        return self._clock() + budget / 1000

    def _executor(self, record: VersionRecord) -> DynamicBatcher | None:
        """The batcher (or instance queue) of a version; None when calls go straight through."""
        key = (record.model, record.version, id(record.instance))
        if key in self._executors:
            return self._executors[key]
        config = self.registry.model_config(record.model)
        with self._executors_lock:
            if key not in self._executors:
                executor = None
                runners: list[BatchFunction]
                if config.batching is not None:
                    runners = [copy.predict_batch for copy in record.copies]
                    executor = DynamicBatcher(
                        runners,
                        config.batching,
                        name=(record.model, record.version),
                        listener=self._batch_listener,
                        clock=self._clock,
                    )
                elif config.instances is not None:
                    # Exclusive copies without batching: batches of one on one thread per copy.
                    runners = [_one_at_a_time(copy) for copy in record.copies]
                    executor = DynamicBatcher(
                        runners,
                        BatchPolicy(max_batch_size=1),
                        name=(record.model, record.version),
                        listener=self._batch_listener,
                        clock=self._clock,
                    )
                self._executors[key] = executor
        return self._executors[key]

    def _call(
        self,
        record: VersionRecord,
        features: Any,
        request_id: str,
        deadline: float | None = None,
        priority: int | None = None,
        after_response: list[Callable[[], None]] | None = None,
    ) -> Prediction:
        started = time.perf_counter()
        with self._model_errors(record):
            done, value = self._start(record, features, deadline, priority, blocking=True)
            if not done:
                try:
                    value = value.result(timeout=self._remaining(deadline))
                except FutureTimeout:
                    value.cancel()
                    raise _late(record) from None
        return self._answered(record, features, value, request_id, started, after_response)

    async def infer_async(
        self,
        model: str,
        features: Any,
        version: str | None = None,
        *,
        request_id: str = "",
        routing_key: str | None = None,
        timeout_ms: float | None = None,
        priority: int | None = None,
        after_response: list[Callable[[], None]] | None = None,
    ) -> Prediction:
        """:meth:`infer` for an event loop: never blocks it while the model runs.

        Batched versions queue the request and await the batch; the others run on the
        service's thread pool (``server.threads`` threads). Same errors as :meth:`infer`.
        """
        deadline, record = self._admit(model, features, version, routing_key, timeout_ms)
        started = time.perf_counter()
        with self._model_errors(record):
            done, value = self._start(record, features, deadline, priority, blocking=False)
            if not done:
                try:
                    value = await asyncio.wait_for(
                        asyncio.wrap_future(value), self._remaining(deadline)
                    )
                except TimeoutError:
                    raise _late(record) from None  # wait_for cancelled the queued request
        return self._answered(record, features, value, request_id, started, after_response)

    def _remaining(self, deadline: float | None) -> float | None:
        """Seconds left until ``deadline`` (None: no deadline)."""
        return None if deadline is None else max(0.0, deadline - self._clock())

    def _start(
        self,
        record: VersionRecord,
        features: Any,
        deadline: float | None,
        priority: int | None,
        *,
        blocking: bool,
    ) -> tuple[bool, Any]:
        """Start the model call: ``(True, output)`` when answered already, else a future.

        ``blocking``: the caller's thread may run the model (a WSGI thread); an event loop
        passes False and gets a future for every call.
        """
        instance = record.instance
        assert instance is not None
        executor = self._executor(record)
        if executor is None:
            if blocking:
                return True, _prepare_and_predict(instance, features, deadline, self._clock)
            pool = self._thread_pool()
            return False, pool.submit(
                _prepare_and_predict, instance, features, deadline, self._clock
            )
        if not blocking:  # an event loop prepares and queues in one step: nothing to announce
            payload = instance.prepare(features)  # validated before it joins a batch
            if deadline is not None and self._clock() >= deadline:
                raise DeadlineExceededError("the request deadline passed before the model ran")
            return False, executor.submit(payload, priority=priority, deadline=deadline)
        with executor.incoming() as arrival:  # lets the batcher wait for it
            payload = instance.prepare(features)
            if deadline is not None and self._clock() >= deadline:
                raise DeadlineExceededError("the request deadline passed before the model ran")
            done, output = executor.run_inline(payload, arrival)  # batcher idle?
            if done:
                if deadline is not None and self._clock() > deadline:
                    raise _late(record)  # as late as a queued request would be
                return True, output
            return False, executor.submit(
                payload, priority=priority, deadline=deadline, arrival=arrival
            )

    @contextmanager
    def _model_errors(self, record: VersionRecord) -> Iterator[None]:
        """Map what the model raised: a 400 for rejected input, a logged 500 for the rest."""
        try:
            yield
        except InvalidInputError as e:
            self._rejected(record.model, e.field or "features", record)
            raise  # the model rejected its input on purpose: a 400, not a model failure
        except (OverloadedError, DeadlineExceededError):
            raise
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

    def _answered(
        self,
        record: VersionRecord,
        features: Any,
        output: Any,
        request_id: str,
        started: float,
        after_response: list[Callable[[], None]] | None,
    ) -> Prediction:
        """Hand an answer to score metrics, the prediction log and the shadows."""
        elapsed = time.perf_counter() - started
        if self._listener:
            self._listener.prediction_made(record.model, record.version, output)
        if self.drift is not None:
            self.drift.observe(record.model, record.version, features, output)
        logged = self._recorder is not None and self._recorder.sampled()
        if logged and self._recorder is not None:
            self._recorder.record_prediction(
                request_id, record.model, record.version, features, output, elapsed
            )
        if self._shadows is not None:
            copy = functools.partial(
                self._shadows.submit,
                record.model,
                record.version,
                features,
                output,
                request_id,
                log_answer=logged,
            )
            if after_response is None:
                copy()
            else:
                after_response.append(copy)
        return Prediction(record.model, record.version, output, elapsed)

    def _thread_pool(self) -> ThreadPoolExecutor:
        """Threads for unbatched model calls made from an event loop (created on first use)."""
        if self._pool is None:
            with self._executors_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(
                        max_workers=self.registry.config.server.threads,
                        thread_name_prefix="servinglib-predict",
                    )
        return self._pool

    def release(self, model: str, version: str) -> None:
        """Stop the batcher of an unloaded version (its queued requests finish first)."""
        with self._executors_lock:
            keys = [k for k in self._executors if k[:2] == (model, version)]
            executors = [self._executors.pop(k) for k in keys]
        for executor in executors:
            if executor is not None:
                executor.close()

    def close(self, timeout_s: float = 30.0) -> None:
        """Finish every queued request and stop the batcher threads."""
        with self._executors_lock:
            executors = [e for e in self._executors.values() if e is not None]
        for executor in executors:
            executor.close(timeout_s)
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def run_followups(followups: list[Callable[[], None]]) -> None:
    """Run the work ``infer(after_response=...)`` deferred; failures are logged, never raised."""
    for followup in followups:
        try:
            followup()
        except Exception:
            log.exception("work deferred until after the response failed")


def _prepare_and_predict(
    instance: Model, features: Any, deadline: float | None, clock: Callable[[], float]
) -> Any:
    """An unbatched call: the deadline is checked once the input is ready."""
    payload = instance.prepare(features)
    if deadline is not None and clock() >= deadline:
        raise DeadlineExceededError("the request deadline passed before the model ran")
    return instance.predict(payload)


def _late(record: VersionRecord) -> DeadlineExceededError:
    return DeadlineExceededError(
        f"model {record.model!r} did not answer within the request deadline"
    )


def _one_at_a_time(model: Model) -> Callable[[list[Any]], list[Any]]:
    def run(batch: list[Any]) -> list[Any]:
        return [model.predict(payload) for payload in batch]

    return run


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
