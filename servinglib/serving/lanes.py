"""A model's lane: everything its requests need, built once per model and worker.

The service looks a model up once per request and finds here its config, input-schema
validator, traffic split, routing rules and the executor (batcher or instance queue) of
each version, instead of asking the registry for each of them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import jsonschema

from servinglib.config.spec import BatchPolicy, ModelConfig
from servinglib.errors import InvalidInputError, ModelNotReadyError, VersionNotFoundError
from servinglib.lifecycle.registry import ModelRegistry, ReadyVersion
from servinglib.model import CALL_SCOPE, CallScope, Model
from servinglib.serving.batching import BatchFunction, BatchListener, DynamicBatcher
from servinglib.serving.routing import TrafficSplit
from servinglib.wire.tensor_bounds import (
    check_bounds,
    check_dimensions,
    dimension_bounds,
    element_bounds,
)
from servinglib.wire.tensor_checks import check_declared_datatype

__all__ = ["QUICK_S", "Lane", "RejectionListener", "to_key"]

log = logging.getLogger("servinglib.serving.service")

# An unbatched model whose calls take less than this (moving average) runs on the event
# loop itself: handing it to a thread and back costs more than the call (about 20 us of
# CPU and two wake-ups), while blocking the loop for this long delays no one noticeably.
QUICK_S = 0.0002
_SMOOTHING = 0.05  # weight of the newest call in the moving average


class RejectionListener(Protocol):
    """Told about rejected inputs; the metrics layer implements it."""

    def input_rejected(self, model: str, field: str) -> None:
        """The input of a request failed validation at ``field``."""


class Lane:
    """One model's request path: routing, input checks and executors.

    Example::

        lane = Lane(registry, registry.model_config("eta"))
        ready = lane.route(None, routing_key="user-42")
        lane.validate({"distance_km": 2.0})
    """

    def __init__(
        self,
        registry: ModelRegistry,
        config: ModelConfig,
        listener: RejectionListener | None = None,
        batch_listener: BatchListener | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = config.name
        self.config = config
        self.routing_header = config.routing_header
        self._registry = registry
        self._listener = listener
        self._batch_listener = batch_listener
        self._clock = clock
        self._validator: jsonschema.protocols.Validator | None = None
        self._properties: frozenset[str] = frozenset()
        if config.input_schema is not None:
            self._validator = jsonschema.Draft202012Validator(config.input_schema)
            self._properties = frozenset(config.input_schema.get("properties", {}))
        self._input_schema = config.input_schema
        # input name -> (axis sizes, element bounds) from the input_schema
        self._limits: dict[str, tuple[tuple[tuple[int, int | None], ...], dict[str, Any]]] = {}
        self._split = TrafficSplit(config.name, config.traffic) if config.traffic else None
        self._override: tuple[Mapping[str, float], TrafficSplit] | None = None
        self._fallbacks_logged: set[str] = set()
        self._executors: dict[tuple[str, int], DynamicBatcher] = {}
        self._lock = threading.Lock()
        self._call_s = QUICK_S * 10  # unmeasured: assume slow until calls say otherwise

    def quick(self) -> bool:
        """Whether the model's unbatched calls are quick enough to run on an event loop.

        Never for a composed model: its steps wait for other lanes.
        """
        return self._call_s < QUICK_S and self.config.composition is None

    def timed(self, instance: Model, payload: Any) -> Any:
        """One unbatched ``predict`` call, folded into the moving average of call durations."""
        started = self._clock()
        try:
            return instance.predict(payload)
        finally:
            self._call_s += _SMOOTHING * (self._clock() - started - self._call_s)

    def shared(self) -> bool:
        """Unbatched with one shared instance: calls may run on any thread, even a loop's."""
        return self.config.batching is None and self.config.instances is None

    def deadline(self, timeout_ms: float | None) -> float:
        """Absolute deadline: the model's ``deadline_ms``, or the caller's budget when shorter."""
        budget: float = self.config.deadline_ms
        if timeout_ms is not None and timeout_ms > 0:
            budget = min(budget, timeout_ms)
        return self._clock() + budget / 1000

    def routing_key(self, header_value: str | None, features: Any) -> str | None:
        """The sticky routing key: the configured feature when there is one, else the header."""
        feature = self.config.routing_feature
        if feature is not None:
            value = features.get(feature) if isinstance(features, Mapping) else None
            return None if value is None else str(to_key(value))
        return header_value

    def route(self, version: str | None, routing_key: str | None) -> ReadyVersion:
        """The READY version that answers: explicit, else the traffic split, else the default.

        A split version that is not READY falls back to the default version.
        """
        if version is not None:
            return self._registry.get(self.name, version)
        split = self._current_split()
        if split is None:
            return self._registry.get(self.name)
        chosen = split.choose(routing_key)
        try:
            return self._registry.get(self.name, chosen)
        except (ModelNotReadyError, VersionNotFoundError):
            if chosen not in self._fallbacks_logged:  # once, not per request
                self._fallbacks_logged.add(chosen)
                log.warning(
                    "model %r: traffic version %r cannot answer; using the default",
                    self.name,
                    chosen,
                )
            return self._registry.get(self.name)

    def _current_split(self) -> TrafficSplit | None:
        """The configured split, unless a rollout step set another in the registry."""
        weights = self._registry.traffic_splits.get(self.name)
        if weights is None:
            return self._split
        if self._override is None or self._override[0] is not weights:
            self._override = (weights, TrafficSplit(self.name, weights))
        return self._override[1]

    def require_version(self, version: str | None) -> None:
        """Refuse a version this model does not have (any state will do).

        Raises:
            VersionNotFoundError: naming the versions there are.
        """
        if version is not None:
            self._registry.record(self.name, version)

    def validate(self, features: Any) -> None:
        """Check LyftLearn-style ``features`` against the model's ``input_schema``.

        Raises:
            InvalidInputError: naming the first failing field.
        """
        if self._validator is None:
            return
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(features))
        if error is not None:
            path = [str(p) for p in error.absolute_path]
            field = path[0] if path else "features"
            self.rejected(field)
            where = "features." + ".".join(path) if path else "features"
            raise InvalidInputError(f"{where}: {error.message}", field=field)

    def check_tensors(self, ready: ReadyVersion, tensors: Mapping[str, Any]) -> None:
        """Check Open Inference tensors against the inputs the version declares.

        Raises:
            InvalidInputError: an unknown or missing input, a datatype other than the
                declared one (no silent cast), or a shape that does not fit.
        """
        specs = ready.instance.inputs
        if not specs or getattr(ready.instance, "checks_own_tensors", False):
            return  # (runtime: precomputed checks its key and hands the rest on)
        try:
            if len(specs) == len(tensors) and all(spec.name in tensors for spec in specs):
                for spec in specs:  # the usual request: exactly the declared inputs
                    tensor = tensors[spec.name]
                    check_declared_datatype(self.name, spec.name, spec.datatype, tensor)
                    spec.check(self.name, tensor.shape)
                    self._check_bounds(spec.name, tensor)
                return
            declared = {spec.name: spec for spec in specs}
            unknown = sorted(set(tensors) - set(declared))
            if unknown:
                raise InvalidInputError(
                    f"model {self.name!r} has no input(s) {unknown}; its inputs are "
                    f"{sorted(declared)}",
                    field=unknown[0],
                )
            missing = sorted(set(declared) - set(tensors))
            if missing:
                raise InvalidInputError(
                    f"model {self.name!r} needs input(s) {missing}", field=missing[0]
                )
            for name, spec in declared.items():
                check_declared_datatype(self.name, name, spec.datatype, tensors[name])
                spec.check(self.name, tensors[name].shape)
                self._check_bounds(name, tensors[name])
        except InvalidInputError as e:
            self.rejected(e.field or "inputs", ready)
            raise

    def _check_bounds(self, name: str, tensor: Any) -> None:
        """The bounds the ``input_schema`` property of the same name gives the elements
        and the sizes of the axes."""
        limits = self._limits.get(name)
        if limits is None:  # one entry, set at once: other threads read it meanwhile
            limits = self._limits[name] = (
                dimension_bounds(self._input_schema, name),
                element_bounds(self._input_schema, name),
            )
        sizes, bounds = limits
        if not sizes and not bounds:
            return
        where = f"input {name!r} of model {self.name!r}"
        try:
            check_dimensions(tuple(tensor.shape), sizes, where)
            check_bounds(tensor, bounds, where)
        except InvalidInputError as e:
            raise InvalidInputError(str(e), field=name) from None

    def rejected(self, field: str, ready: ReadyVersion | None = None) -> None:
        """Count a rejected input; fields outside the schema or tensor names become ``_other``."""
        if self._listener is None:
            return
        known = field in ("features", "inputs") or field in self._properties
        if not known and ready is not None:
            known = any(spec.name == field for spec in ready.instance.inputs)
        self._listener.input_rejected(self.name, field if known else "_other")

    def executor(self, ready: ReadyVersion) -> DynamicBatcher:
        """The version's own executor: its batcher, or a bounded queue in front of its copies.

        Every version gets one, so a hung or slow version can only exhaust its own threads.
        """
        key = (ready.version, id(ready.instance))
        executor = self._executors.get(key)
        if executor is not None:
            return executor
        with self._lock:
            if key not in self._executors:
                self._executors[key] = self._new_executor(ready)
            return self._executors[key]

    def _new_executor(self, ready: ReadyVersion) -> DynamicBatcher:
        runners: list[BatchFunction]
        if self.config.batching is not None:
            runners = [copy.predict_batch for copy in ready.copies]
            policy = self.config.batching
        elif self.config.instances is not None:
            # Exclusive copies without batching: batches of one on one thread per copy.
            runners = [self._one_at_a_time(copy) for copy in ready.copies]
            policy = BatchPolicy(max_batch_size=1)
        else:  # one shared, thread-safe instance: server.threads calls at a time
            threads = self._registry.config.server.threads
            runners = [self._one_at_a_time(ready.instance)] * threads
            policy = BatchPolicy(max_batch_size=1, max_queue_size=8 * threads)
        return DynamicBatcher(
            runners,
            policy,
            name=(self.name, ready.version),
            listener=self._batch_listener,
            clock=self._clock,
        )

    @property
    def composes(self) -> bool:
        """Whether this lane's model calls other models one request at a time (its payloads
        then travel with their :class:`CallScope`)."""
        return self.config.composition is not None and self.config.batching is None

    def payload(self, payload: Any, scope: CallScope) -> Any:
        """What the executor queues: a composed model's payload travels with its call scope."""
        return (payload, scope) if self.composes else payload

    def _one_at_a_time(self, model: Model) -> Callable[[list[Any]], list[Any]]:
        if self.composes:

            def run_composed(batch: list[Any]) -> list[Any]:
                return [self._in_scope(model, *item) for item in batch]

            return run_composed

        def run(batch: list[Any]) -> list[Any]:
            return [self.timed(model, payload) for payload in batch]

        return run

    def _in_scope(self, model: Model, payload: Any, scope: CallScope) -> Any:
        token = CALL_SCOPE.set(scope)  # the steps inherit the request's deadline, id, ...
        try:
            return self.timed(model, payload)
        finally:
            CALL_SCOPE.reset(token)

    def release(self, version: str) -> list[DynamicBatcher]:
        """Forget the executors of ``version``; returns them for the caller to close."""
        with self._lock:
            keys = [k for k in self._executors if k[0] == version]
            executors = [self._executors.pop(k) for k in keys]
        return executors

    def executors(self) -> list[tuple[str, DynamicBatcher]]:
        """Every executor started so far, with its version."""
        with self._lock:
            return [(version, e) for (version, _), e in self._executors.items()]


def to_key(value: Any) -> str:
    """A stable string for a routing-key feature value."""
    return value if isinstance(value, str) else repr(value)
