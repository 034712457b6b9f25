"""The Model the registry loads for each version of a composed model.

``load()`` checks that every model a version calls is READY in its pinned version (a
member that failed its self-tests fails this version, naming the member); ``predict()``
runs the steps through :class:`~servinglib.model.ModelCaller`, each wave of independent
steps at once, within the request's deadline.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from servinglib.compose.combiners import combine
from servinglib.compose.order import step_order
from servinglib.compose.spec import (
    REQUEST,
    Composition,
    EnsembleVersion,
    PipelineVersion,
    Reference,
    Step,
)
from servinglib.compose.triton import combiner_config, ensemble_scheduling
from servinglib.errors import (
    DeadlineExceededError,
    InvalidInputError,
    ModelLoadError,
    ServinglibError,
)
from servinglib.model import CALL_SCOPE, CallScope, LoopModel, ModelCaller, StepCall

__all__ = ["ComposedModel", "StepOutputError"]

log = logging.getLogger("servinglib.compose")


class StepOutputError(ServinglibError):
    """A step answered something the next step or the answer cannot read."""


class ComposedModel(LoopModel):
    """One version of a ``pipeline:`` or ``ensemble:`` model."""

    platform = "ensemble"  # what Triton calls every composed model
    composition: Composition
    spec: PipelineVersion | EnsembleVersion

    def load(self, path: Path) -> None:
        """Take this version's spec and check that every model it calls is READY."""
        composition = self.settings.composition
        if not isinstance(composition, Composition) or self.settings.caller is None:
            raise ModelLoadError(
                "ComposedModel serves `pipeline:`/`ensemble:` entries only; use class: for yours"
            )
        self.composition = composition
        self.spec = composition.versions[self.settings.version]
        self._caller: ModelCaller = self.settings.caller
        self._waves = step_order(self.spec.steps)
        self._combiner: Callable[..., Any] | None = None
        if isinstance(self.spec, EnsembleVersion) and self.spec.function is not None:
            function = self._caller.import_object(self.spec.function)
            if not callable(function):
                raise ModelLoadError(
                    f"combiner function {self.spec.function!r} is not callable; point "
                    "`function` at a function of (answers, weights)"
                )
            self._combiner = function
        for step in self.spec.steps:
            self._caller.check_ready(step.model, step.version, step.name)

    def ensemble_scheduling(self) -> dict[str, Any]:
        """Triton's ``ensemble_scheduling`` for this version (``/v2/models/{m}/config``)."""
        name, version = self.settings.name, self.settings.version
        return ensemble_scheduling(name, version, self.spec, self.inputs, self.outputs)

    def combiner_config(self) -> dict[str, Any] | None:
        """The Triton configuration of this ensemble version's combiner step (None: a pipeline)."""
        if not isinstance(self.spec, EnsembleVersion):
            return None
        return combiner_config(self.settings.name, self.settings.version, self.spec, self.outputs)

    def predict(self, features: Any) -> Any:
        """Run the steps (or members) and build the answer."""
        scope = CALL_SCOPE.get()
        deadline = None if scope is None else scope.deadline
        if isinstance(self.spec, EnsembleVersion):
            return self._ensemble(self.spec, features, scope, deadline)
        results: dict[str, Any] = {REQUEST: features}
        for wave in self._waves:
            calls = [self._step_call(step, results, scope) for step in wave]
            self._collect(wave, self._run(calls, deadline, wave), results)
        return self._answer(self.spec, results)

    async def predict_async(self, features: Any, scope: CallScope | None) -> Any:
        """:meth:`predict` on an event loop: each wave's steps awaited together, no thread."""
        if isinstance(self.spec, EnsembleVersion):
            outcomes = await self._gather(list(self.spec.steps), {REQUEST: features}, scope)
            return self._combine(self.spec, outcomes)
        results: dict[str, Any] = {REQUEST: features}
        for wave in self._waves:
            self._collect(wave, await self._gather(wave, results, scope), results)
        return self._answer(self.spec, results)

    async def _gather(
        self, steps: list[Step], results: Mapping[str, Any], scope: CallScope | None
    ) -> list[Any]:
        """Await ``steps`` at once: their answers, or the errors they raised."""
        calls = [self._caller.call_async(self._step(step, results, scope)) for step in steps]
        return list(await asyncio.gather(*calls, return_exceptions=True))

    @staticmethod
    def _collect(wave: list[Step], outcomes: list[Any], results: dict[str, Any]) -> None:
        for step, outcome in zip(wave, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                raise outcome
            results[step.name] = outcome

    @staticmethod
    def _answer(spec: PipelineVersion, results: Mapping[str, Any]) -> Any:
        outputs = spec.outputs
        if isinstance(outputs, Reference):
            return _read(outputs, results, "the answer")
        return {name: _read(ref, results, "the answer") for name, ref in outputs.items()}

    @staticmethod
    def _inputs(step: Step, results: Mapping[str, Any]) -> Any:
        if step.inputs is None:
            return results[REQUEST]
        return {name: _read(ref, results, step.name) for name, ref in step.inputs.items()}

    def _step(self, step: Step, results: Mapping[str, Any], scope: CallScope | None) -> StepCall:
        """The call of ``step`` with its inputs read from ``results``, as part of ``scope``."""
        owner = (self.settings.name, self.settings.version, step.name)
        return StepCall(step.model, step.version, self._inputs(step, results), owner, scope)

    def _step_call(
        self, step: Step, results: Mapping[str, Any], scope: CallScope | None
    ) -> Callable[[], Any]:
        return functools.partial(self._caller.call, self._step(step, results, scope))

    def _run(
        self, calls: list[Callable[[], Any]], deadline: float | None, steps: list[Step]
    ) -> list[Any]:
        """Run ``calls`` at once (the first on this thread): answers, or the errors raised."""
        futures: list[Future[Any]] = [self._caller.submit(c) for c in calls[1:]]
        outcomes: list[Any] = []
        try:
            outcomes.append(calls[0]())
        except Exception as e:
            outcomes.append(e)
        for future, step in zip(futures, steps[1:], strict=True):
            try:
                outcomes.append(future.result(timeout=_remaining(deadline)))
            except FutureTimeout:
                future.cancel()
                outcomes.append(
                    DeadlineExceededError(
                        f"step {step.name!r} (model {step.model!r}) did not answer within the "
                        "request deadline"
                    )
                )
            except Exception as e:
                outcomes.append(e)
        return outcomes

    def _ensemble(
        self,
        spec: EnsembleVersion,
        features: Any,
        scope: CallScope | None,
        deadline: float | None,
    ) -> Any:
        steps = list(spec.steps)
        calls = [self._step_call(step, {REQUEST: features}, scope) for step in steps]
        return self._combine(spec, self._run(calls, deadline, steps))

    def _combine(self, spec: EnsembleVersion, outcomes: list[Any]) -> Any:
        """The members' answers combined, or the first failure under the failure policy."""
        answers, weights, failed = [], [], []
        for member, outcome in zip(spec.members, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                failed.append((member.name, outcome))
            else:
                answers.append(outcome)
                weights.append(member.weight)
        if failed and (spec.on_member_failure == "fail" or len(answers) < spec.min_members):
            raise failed[0][1]
        try:
            combined = self._combine_answers(spec, answers, weights)
        except Exception:
            if spec.on_member_failure == "fail":
                raise
            # answer_from_rest: a member whose answer the combiner cannot use failed too
            names = [m.name for m, o in zip(spec.members, outcomes, strict=True) if not _raised(o)]
            kept, unusable = self._usable(spec, names, answers, weights)
            if len(kept[0]) < spec.min_members or not kept[0]:
                raise
            failed += unusable
            combined = self._combine_answers(spec, *kept)
        if failed:
            log.warning(
                "model %r version %r answered without member(s) %s",
                self.settings.name,
                self.settings.version,
                [name for name, _ in failed],
            )
        return combined

    def _combine_answers(
        self, spec: EnsembleVersion, answers: list[Any], weights: list[float]
    ) -> Any:
        if self._combiner is not None:
            return self._combiner(answers, weights)
        return combine(spec.combiner, answers, weights)

    def _usable(
        self, spec: EnsembleVersion, names: list[str], answers: list[Any], weights: list[float]
    ) -> tuple[tuple[list[Any], list[float]], list[tuple[str, BaseException]]]:
        """The answers the combiner can use together, in member order, and the others.

        Each answer joins those kept so far when the combiner accepts them all (the first
        usable answer sets the shape the others must share).
        """
        kept: list[Any] = []
        kept_weights: list[float] = []
        unusable: list[tuple[str, BaseException]] = []
        for name, answer, weight in zip(names, answers, weights, strict=True):
            try:
                self._combine_answers(spec, [*kept, answer], [*kept_weights, weight])
            except Exception as e:
                unusable.append((name, e))
                continue
            kept.append(answer)
            kept_weights.append(weight)
        return (kept, kept_weights), unusable


def _raised(outcome: Any) -> bool:
    return isinstance(outcome, BaseException)


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return max(0.0, deadline - time.monotonic())


def _read(ref: Reference, results: Mapping[str, Any], reader: str) -> Any:
    value = results[ref.source]
    if ref.field is None:
        return value
    if isinstance(value, Mapping) and ref.field in value:
        return value[ref.field]
    if ref.source == REQUEST:
        raise InvalidInputError(
            f"the request has no {ref.field!r}, which {reader!r} reads; send it",
            field=ref.field,
        )
    has = sorted(value) if isinstance(value, Mapping) else type(value).__name__
    raise StepOutputError(
        f"{reader!r} reads {str(ref)!r} but step {ref.source!r} answered {has}; map an output "
        "the step's model returns"
    )
