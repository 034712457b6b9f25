"""InferenceService: route a decoded request to the right model version and call it.

Per request: admit it (deadline, version, input checks) in one place, call the model,
then hand the answer to the observers (drift monitoring, prediction log) and the shadow
router. Everything after the model call is non-blocking.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from servinglib.errors import (
    ModelNotFoundError,
    OverloadedError,
    PredictionError,
)
from servinglib.lifecycle.registry import ModelRegistry
from servinglib.model import CallScope, LoopModel
from servinglib.serving import loop_calls, tracing
from servinglib.serving.admitted import AdmittedCall as _Call
from servinglib.serving.batching import BatchListener, DynamicBatcher
from servinglib.serving.catalog import VersionCatalog
from servinglib.serving.lanes import Lane
from servinglib.serving.recording import AnsweredPrediction, AnswerRecorder
from servinglib.serving.requests import (
    DriftObserver,
    InferenceRequest,
    Prediction,
    ServiceListener,
    ShadowSubmitter,
)
from servinglib.shadow.copies import ShadowCopy
from servinglib.wire.batch_rows import split_rows, splits_rows, stack_rows

__all__ = [
    "DriftObserver",
    "InferenceRequest",
    "InferenceService",
    "Prediction",
    "ServiceListener",
    "ShadowSubmitter",
    "run_followups",
]

log = logging.getLogger("servinglib.serving.service")


class InferenceService:
    """Admit a request once, call the model, report failures safely.

    Example::

        service = InferenceService(registry)
        service.infer(InferenceRequest("eta", {"distance_km": 2.0})).output
    """

    def __init__(
        self,
        registry: ModelRegistry,
        listener: ServiceListener | None = None,
        recorder: AnswerRecorder | None = None,
        shadows: ShadowSubmitter | None = None,
        batch_listener: BatchListener | None = None,
        clock: Callable[[], float] = time.monotonic,
        drift: DriftObserver | None = None,
    ) -> None:
        self._registry = registry
        self.catalog = VersionCatalog(registry)  # what the front ends may read
        self._drift = drift
        self._listener = listener
        self._clock = clock
        self._recorder = recorder
        self._shadows = shadows if shadows is not None and shadows.enabled else None
        self._lanes = {
            name: Lane(registry, registry.model_config(name), listener, batch_listener, clock)
            for name in registry.model_names()
        }
        self.models = frozenset(self._lanes)

    def lane(self, model: str) -> Lane:
        """The lane of ``model``.

        Raises:
            ModelNotFoundError: no such model is configured.
        """
        lane = self._lanes.get(model)
        if lane is None:
            raise ModelNotFoundError(model, list(self._lanes))
        return lane

    def infer(
        self, request: InferenceRequest, after_response: list[Callable[[], None]] | None = None
    ) -> Prediction:
        """Answer ``request``; the calling thread waits for the version's executor.

        With ``after_response``, work that must not delay the answer (shadow copies) is
        appended there for the caller to run once the response is sent; without it, it is
        queued at once.

        Raises:
            ModelNotFoundError, VersionNotFoundError, ModelNotReadyError: routing failed.
            InvalidInputError: the input breaks the schema or the declared tensors.
            OverloadedError: the version's queue is full.
            DeadlineExceededError: no answer within the deadline.
            PredictionError: the model raised; details are logged under its error id.
        """
        lane = self.lane(request.model) if request.lane is None else request.lane
        rows = self._rows(request, lane)
        if rows is not None:
            return self._stacked(request, [self.infer(row, after_response) for row in rows])
        call = self._admit(request, lane)
        with call.model_errors():
            done, value = self._start(call, request, blocking=True, followups=after_response)
            if not done:
                try:
                    value = value.result(timeout=call.remaining())
                except FutureTimeout:
                    value.cancel()
                    raise call.late() from None
        return self._answered(call, request, value, after_response)

    async def infer_async(
        self, request: InferenceRequest, after_response: list[Callable[[], None]] | None = None
    ) -> Prediction:
        """:meth:`infer` for an event loop: never blocks it while the model runs.

        Every version queues the request on its own executor (its batcher, or its copies'
        threads) and the loop awaits the answer until the deadline; a shared unbatched
        model runs on the loop itself while its calls stay quicker than a thread hop
        (:meth:`Lane.quick`); a composed model awaits its steps on the loop
        (a :class:`~servinglib.model.LoopModel`). Same errors as :meth:`infer`.
        """
        lane = self.lane(request.model) if request.lane is None else request.lane
        rows = self._rows(request, lane)
        if rows is not None:
            answers = await asyncio.gather(*(self.infer_async(r, after_response) for r in rows))
            return self._stacked(request, list(answers))
        call = self._admit(request, lane)
        with call.model_errors():
            instance = call.ready.instance
            if isinstance(instance, LoopModel):
                call.check_deadline()
                scope = call.scope(request, after_response)
                done, value = (
                    False,
                    asyncio.ensure_future(instance.predict_async(request.inputs, scope)),
                )
            else:
                done, value = self._start(call, request, blocking=False, followups=after_response)
            if not done:
                waiting = asyncio.wrap_future(value)
                try:
                    value = await asyncio.wait_for(waiting, call.remaining())
                except TimeoutError:
                    raise call.late() from None  # wait_for cancelled the queued request
        return self._answered(call, request, value, after_response)

    def call_version(self, model: str, version: str, features: Any, timeout_s: float) -> Any:
        """Run ``features`` on a version's own executor at its lowest priority (shadows).

        Raises:
            DeadlineExceededError: no answer within ``timeout_s``.
            OverloadedError, ModelNotReadyError: the version cannot take it now.
        """
        lane = self.lane(model)
        call = _Call(lane, self._registry.get(model, version), 0.0, self._clock)
        call.deadline = self._clock() + timeout_s
        executor = lane.executor(call.ready)
        future = executor.submit(
            lane.payload(call.ready.instance.prepare(features), CallScope(call.deadline)),
            priority=executor.policy.priority_levels - 1,
            deadline=call.deadline,
        )
        try:
            return future.result(timeout=call.remaining())
        except FutureTimeout:
            future.cancel()
            raise call.late() from None

    def _rows(self, request: InferenceRequest, lane: Lane) -> list[InferenceRequest] | None:
        """A tensor request's rows, when it adds a batch dimension to a batching model.

        Triton's clients send ``[b, *shape]`` to a model with ``max_batch_size`` > 0; a
        batching Python model declares its inputs per item, so each row becomes a request
        of its own, batched with everyone else's (None: answer the request as it is).
        """
        if not request.tensors:
            return None
        policy = lane.config.batching
        if policy is None:
            return None
        specs = self._registry.get(request.model, request.version).instance.inputs
        if not splits_rows(specs, policy):
            return None
        rows = split_rows(request.inputs, specs, policy.max_batch_size)
        if rows is None:
            return None
        return [dataclasses.replace(request, inputs=row, lane=lane) for row in rows]

    @staticmethod
    def _stacked(request: InferenceRequest, answers: list[Prediction]) -> Prediction:
        """One prediction from the rows' predictions (outputs stacked along a new axis)."""
        first = answers[0]
        try:
            output = stack_rows([answer.output for answer in answers])
        except TypeError as e:
            raise PredictionError.logged(
                request.model, first.version, "answered rows that cannot be stacked", e
            ) from e
        return Prediction(first.model, first.version, output, sum(a.latency_s for a in answers))

    def _admit(self, request: InferenceRequest, lane: Lane) -> _Call:
        """The one admission path: the deadline and version, once the input passes."""
        if request.trace is None:
            return self._admitted(request, lane)
        started = time.time_ns()
        call = self._admitted(request, lane)
        call.trace = request.trace
        if tracing.ACTIVE is not None:
            tracing.ACTIVE.record("admit", request.trace, started)
        return call

    def _admitted(self, request: InferenceRequest, lane: Lane) -> _Call:
        deadline = lane.deadline(request.timeout_ms) - request.waited_s
        if request.waited_s and self._clock() >= deadline:
            raise OverloadedError(
                f"the request waited {request.waited_s * 1000:.0f} ms for a server thread, "
                f"past the deadline of model {request.model!r}; retry later or another replica"
            )
        if request.tensors:
            ready = lane.route(request.version, request.routing_key)
            lane.check_tensors(ready, request.inputs)
        else:
            key = lane.routing_key(request.routing_key, request.inputs)
            ready = lane.route(request.version, key)
            lane.validate(request.inputs)
        return _Call(lane, ready, deadline, self._clock)

    def _start(
        self,
        call: _Call,
        request: InferenceRequest,
        *,
        blocking: bool,
        followups: list[Callable[[], None]] | None = None,
    ) -> tuple[bool, Any]:
        """Start the model call: ``(True, output)`` when answered already, else a future.

        Every call runs on the version's own executor, so the caller can answer 504 at the
        deadline whether or not the call started. The exceptions: a composed model's step
        on a thread (``request.inline``) runs a shared unbatched model there, since the
        thread would only wait for it, and an event loop runs one itself, both only while
        its calls stay quicker than a thread hop: a step run inline cannot be given up at
        its deadline, so a member that hangs (or has not answered yet) runs on its own
        executor, and the ensemble answers from the rest at the member's deadline.
        """
        lane, deadline = call.lane, call.deadline
        instance, features = call.ready.instance, request.inputs
        if lane.shared() and blocking and request.inline and lane.quick():
            payload = instance.prepare(features)
            call.check_deadline()
            if request.trace is not None:
                return True, _traced(request.trace, lane.timed, instance, payload)
            return True, lane.timed(instance, payload)
        if lane.shared() and not blocking and lane.quick() and loop_calls.available():
            payload = instance.prepare(features)
            call.check_deadline()
            ready = call.ready
            started = time.time_ns()
            done, value = loop_calls.run_on_loop(
                ready.model, ready.version, lane.timed, instance, payload
            )
            if done and request.trace is not None and tracing.ACTIVE is not None:
                tracing.ACTIVE.record("predict", request.trace, started)
            if done:
                return True, value
        executor = lane.executor(call.ready)
        if not blocking:  # an event loop prepares and queues in one step: nothing to announce
            payload = instance.prepare(features)  # checked first
            if lane.composes:
                payload = lane.payload(payload, call.scope(request, followups))
            call.check_deadline()
            return False, executor.submit(
                payload, priority=request.priority, deadline=deadline, trace=request.trace
            )
        with executor.incoming() as arrival:  # lets the batcher wait for it
            payload = instance.prepare(features)
            if lane.composes:
                payload = lane.payload(payload, call.scope(request, followups))
            call.check_deadline()
            return False, executor.submit(
                payload,
                priority=request.priority,
                deadline=deadline,
                arrival=arrival,
                trace=request.trace,
            )

    def _answered(
        self,
        call: _Call,
        request: InferenceRequest,
        output: Any,
        after_response: list[Callable[[], None]] | None,
    ) -> Prediction:
        """Hand an answer to drift monitoring, the prediction log and the shadows."""
        ready = call.ready
        elapsed = time.perf_counter() - call.started
        if not request.observed:
            return Prediction(ready.model, ready.version, output, elapsed)
        features = request.inputs
        if self._drift is not None:
            self._drift.observe(ready.model, ready.version, features, output, request.tensors)
        logged = self._recorder is not None and self._recorder.sampled()
        if logged and self._recorder is not None:
            self._recorder.record(
                AnsweredPrediction(
                    request.request_id,
                    ready.model,
                    ready.version,
                    features,
                    output,
                    elapsed * 1000,
                    *tracing.trace_ids_of(request.trace),
                )
            )
        if self._shadows is not None:
            model, version, rid = ready.model, ready.version, request.request_id
            answered = ShadowCopy(model, version, features, output, rid, logged, request.trace)
            copy = functools.partial(self._shadows.submit, answered)
            if after_response is None:
                copy()
            else:
                after_response.append(copy)
        return Prediction(ready.model, ready.version, output, elapsed)

    def drift_report(self, model: str, version: str) -> dict[str, Any] | None:
        """The version's drift scores across workers (None: no profile, or no monitor).

        Raises:
            ModelNotFoundError, VersionNotFoundError: no such model or version.
        """
        self._registry.record(model, version)
        return None if self._drift is None else self._drift.report(model, version)

    def is_ready(self) -> bool:
        """Every default version is READY and has a working thread."""
        return self._registry.is_ready() and not self.wedged()

    def wedged(self) -> list[tuple[str, str]]:
        """``(model, version)`` of every version whose threads are all stuck in a call."""
        return [(name, version) for name, version, e in self.executors() if e.wedged]

    def executors(self) -> Iterator[tuple[str, str, DynamicBatcher]]:
        """``(model, version, executor)`` of every executor started so far."""
        for name, lane in self._lanes.items():
            for version, executor in lane.executors():
                yield name, version, executor

    def release(self, model: str, version: str) -> None:
        """Stop the batcher of an unloaded version (its queued requests finish first)."""
        for executor in self.lane(model).release(version):
            executor.close()

    def close(self, timeout_s: float = 30.0) -> None:
        """Finish every queued request and stop the batcher threads."""
        for _, _, executor in self.executors():
            executor.close(timeout_s)


def _traced(context: Any, function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` recorded as a ``predict`` span under ``context``."""
    started = time.time_ns()
    try:
        return function(*args)
    finally:
        if tracing.ACTIVE is not None:
            tracing.ACTIVE.record("predict", context, started)


def run_followups(followups: list[Callable[[], None]]) -> None:
    """Run the work ``infer(after_response=...)`` deferred; failures are logged, never raised."""
    for followup in followups:
        try:
            followup()
        except Exception:
            log.exception("work deferred until after the response failed")
