"""Calls a composed model's steps through the service: each step in its model's own lane.

:class:`LaneCaller` is built from the service it calls through, then handed to every
model the registry loads as ``ModelSettings.caller``. A step's call
is an :class:`~servinglib.serving.service.InferenceRequest` of the member model, so its batcher,
instances, admission checks, metrics and deadline apply; its budget is what remains of the
composed request's deadline, and a step whose usual duration no longer fits never starts.
A step inherits the composed request's :class:`~servinglib.model.CallScope`: its request id
(with ``.<step>`` appended, so the prediction log ties the steps to their parent), priority
and routing key; its shadow copies join the parent's deferred work, so they start only
once the client has the parent's answer.
The calls of a version that is still loading (its self-tests and warm-up) are not
monitored, logged or shadowed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np

from servinglib.compose._step_threads import StepThreads
from servinglib.errors import (
    DeadlineExceededError,
    ModelLoadError,
    ModelNotFoundError,
    ModelNotReadyError,
    ServinglibError,
    VersionNotFoundError,
)
from servinglib.lifecycle.importing import import_object
from servinglib.model import CallScope, StepCall
from servinglib.serving import tracing
from servinglib.serving.service import InferenceRequest, InferenceService

__all__ = ["LaneCaller", "StepListener"]

_SMOOTHING = 0.1  # weight of the newest call in a step's moving-average duration


class StepListener(Protocol):
    """Told about every step a composed model ran; the metrics layer implements it."""

    def step_finished(self, model: str, version: str, step: str, seconds: float, ok: bool) -> None:
        """One step of ``model`` ``version`` answered (``ok``) or failed after ``seconds``."""


class LaneCaller:
    """The :class:`~servinglib.model.ModelCaller` of a worker.

    Example::

        registry = ModelRegistry(config)
        caller = LaneCaller(InferenceService(registry))
        registry.load_all(caller)
    """

    def __init__(
        self,
        service: InferenceService,
        listener: StepListener | None = None,
        threads: int = 8,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._service = service
        self._listener = listener
        self._clock = clock
        self._threads = threads
        self._pool: StepThreads | None = None
        self._lock = threading.Lock()
        self._usual_s: dict[tuple[str, str, str], float] = {}

    def call(self, step: StepCall) -> Any:
        """Answer ``step.inputs`` with ``step.model`` through its lane, as part of its parent.

        Raises:
            DeadlineExceededError: the remaining budget cannot cover the step's usual duration.
            ServinglibError: whatever the member's lane raised.
        """
        span = _step_span(step)
        request = self._request(step, span)
        with self._timed(step.owner, span):
            return self._service.infer(request, _followups(step.parent)).output

    async def call_async(self, step: StepCall) -> Any:
        """:meth:`call` on an event loop: the step's lane is awaited, never waited for."""
        span = _step_span(step)
        request = self._request(step, span)
        with self._timed(step.owner, span):
            return (await self._service.infer_async(request, _followups(step.parent))).output

    def _request(self, step: StepCall, span: Any = None) -> InferenceRequest:
        """The step's request: what remains of the deadline as its timeout, and the parent's
        request id (``<id>.<step>``), priority, routing key and trace (under ``span``, the
        step's own span, when it has one)."""
        owner, parent = step.owner, step.parent
        timeout_ms = None
        deadline = None if parent is None else parent.deadline
        if deadline is not None:
            remaining = deadline - self._clock()
            usual = self._usual_s.get(owner, 0.0)
            if remaining <= usual:
                raise DeadlineExceededError(
                    f"step {owner[2]!r} of model {owner[0]!r} version {owner[1]!r} usually takes "
                    f"{usual * 1000:.1f} ms and {max(remaining, 0) * 1000:.1f} ms were left; "
                    "raise the composed model's deadline_ms or the caller's timeout"
                )
            timeout_ms = remaining * 1000
        # inline: the caller would only wait for the step; an unbatched shared step runs on
        # its thread (or loop) rather than paying two thread hand-offs around it.
        request_id = f"{parent.request_id}.{owner[2]}" if parent and parent.request_id else ""
        return InferenceRequest(
            step.model,
            step.inputs,
            version=step.version,
            tensors=_are_tensors(step.inputs),
            request_id=request_id,
            routing_key=None if parent is None else parent.routing_key,
            timeout_ms=timeout_ms,
            priority=None if parent is None else parent.priority,
            inline=True,
            observed=self._serving(owner),
            trace=_step_trace(parent, span),
        )

    def _serving(self, owner: tuple[str, str, str]) -> bool:
        """Whether the calling version serves traffic (not self-testing or warming up)."""
        try:
            view = self._service.catalog.view(owner[0], owner[1])
        except ServinglibError:
            return True
        return view.ready

    @contextmanager
    def _timed(self, owner: tuple[str, str, str], span: Any = None) -> Iterator[None]:
        """Time one step call: its usual duration and the listener learn of it (its span,
        when it has one, ends with it)."""
        started, ok = self._clock(), False
        try:
            yield
            ok = True
        finally:
            self._finished(owner, started, ok, span)

    def _finished(
        self, owner: tuple[str, str, str], started: float, ok: bool, span: Any = None
    ) -> None:
        if span is not None:
            span.set_attribute("servinglib.ok", ok)
            span.end()
        seconds = self._clock() - started
        if ok:
            usual = self._usual_s.get(owner, seconds)
            self._usual_s[owner] = usual + _SMOOTHING * (seconds - usual)
        if self._listener is not None:
            self._listener.step_finished(*owner, seconds, ok)

    def check_ready(self, model: str, version: str | None, step: str) -> None:
        """Raise ModelLoadError naming ``step`` unless ``model`` (``version``) is READY."""
        try:
            self._service.catalog.ready(model, version)
        except (ModelNotReadyError, VersionNotFoundError, ModelNotFoundError) as e:
            raise ModelLoadError(f"step {step!r} cannot run: {e}") from e

    def submit(self, work: Callable[[], Any]) -> Future[Any]:
        """Run ``work`` on the caller's threads (steps that run beside another)."""
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = StepThreads(self._threads, "servinglib-step")
        return self._pool.submit(work)

    def import_object(self, ref: str) -> object:
        """Import ``module:name`` the way model classes are imported (custom combiners)."""
        config = self._service.catalog.config
        return import_object(ref, config.root, config.python_path)

    def close(self) -> None:
        """Stop the step threads; a step still in a member's call is not waited for."""
        if self._pool is not None:
            self._pool.close()


def _step_span(step: StepCall) -> Any:
    """The span of one step, under the parent request's (None when that is not traced)."""
    owner, parent = step.owner, step.parent
    if parent is None or parent.trace is None or tracing.ACTIVE is None:
        return None
    return tracing.ACTIVE.start(
        f"step {owner[2]}",
        parent.trace,
        {"servinglib.model": owner[0], "servinglib.version": owner[1], "servinglib.step": owner[2]},
    )


def _step_trace(parent: CallScope | None, span: Any) -> Any:
    """The trace context the step's request carries: its span's, else its parent's."""
    if parent is None or parent.trace is None or tracing.ACTIVE is None:
        return None
    return tracing.ACTIVE.in_context(span, parent.trace)


def _followups(parent: CallScope | None) -> list[Callable[[], None]] | None:
    """Where a step's deferred work goes: the parent's, else queued at once (None)."""
    return None if parent is None else parent.followups


def _are_tensors(inputs: Any) -> bool:
    """Decoded Open Inference tensors (checked against the member's declared inputs)."""
    return (
        isinstance(inputs, Mapping)
        and bool(inputs)
        and all(isinstance(v, np.ndarray) for v in inputs.values())
    )
