"""What ``servinglib validate`` refuses in ``pipeline:`` and ``ensemble:``.

Every error names the composed model, its version, the step and the fix: a step naming a
model that is not configured, a version pin that does not exist, a reference to a step or
an input/output name that does not exist, and cycles (between steps, or between composed
models that call each other).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from servinglib.compose.order import step_order
from servinglib.compose.spec import (
    REQUEST,
    Composition,
    EnsembleVersion,
    PipelineVersion,
    Reference,
    Step,
)
from servinglib.errors import ConfigError
from servinglib.model import TensorSpec

__all__ = ["CompositionError", "DeclaredModel", "check_compositions"]


class DeclaredModel(Protocol):
    """What the checks read of a configured model (``ModelConfig`` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def repository(self) -> Path: ...
    @property
    def versions(self) -> tuple[str, ...] | None: ...
    @property
    def inputs(self) -> tuple[TensorSpec, ...]: ...
    @property
    def outputs(self) -> tuple[TensorSpec, ...]: ...
    @property
    def composition(self) -> Composition | None: ...
    @property
    def key_path(self) -> str: ...


class CompositionError(ConfigError):
    """Several composed versions are wrong: ``problems`` holds one message for each
    (``source`` and ``key_path`` are the first one's)."""

    def __init__(self, problems: Sequence[ConfigError]) -> None:
        self.problems = [str(p) for p in problems]
        super().__init__("\n".join(self.problems))
        self.source, self.key_path = problems[0].source, problems[0].key_path


def check_compositions(models: Sequence[DeclaredModel], label: str) -> None:
    """Refuse every composed version among ``models`` that is wrong (its first problem each).

    Raises:
        ConfigError: naming the key path, the step and the fix; :class:`CompositionError`
            when several versions are wrong, with every message.
    """
    by_name = {m.name: m for m in models}
    problems: list[ConfigError] = []
    for model in models:
        if model.composition is None:
            continue
        for version, spec in model.composition.versions.items():
            where = f"{model.key_path}.{model.composition.kind}.{version}"
            try:
                _check_version(model, version, spec, by_name, label, where)
            except ConfigError as e:
                problems.append(e)
    try:
        _check_model_cycles(models, label)
    except ConfigError as e:
        problems.append(e)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise CompositionError(problems)


def _fail(message: str, label: str, where: str) -> ConfigError:
    return ConfigError(message, source=label, key_path=where)


def _check_version(
    model: DeclaredModel,
    version: str,
    spec: PipelineVersion | EnsembleVersion,
    by_name: Mapping[str, DeclaredModel],
    label: str,
    where: str,
) -> None:
    if not (model.repository / version).is_dir():
        raise _fail(
            f"composed model {model.name!r} version {version!r} has no directory "
            f"{model.repository / version}; create it with a test_data.json for its self-tests",
            label,
            where,
        )
    seen: set[str] = set()
    for i, step in enumerate(spec.steps):
        at = f"{where}.{'steps' if isinstance(spec, PipelineVersion) else 'members'}[{i}]"
        if step.name in seen or step.name == REQUEST:
            raise _fail(
                f"step name {step.name!r} is used twice (or is reserved); give each step a "
                "unique `name`",
                label,
                at,
            )
        seen.add(step.name)
        _check_member(model, step, by_name, label, at)
    if isinstance(spec, EnsembleVersion):
        _check_ensemble(spec, label, where)
        return
    steps = {s.name: s for s in spec.steps}
    for i, step in enumerate(spec.steps):
        at = f"{where}.steps[{i}].inputs"
        for name, ref in (step.inputs or {}).items():
            _check_reference(ref, steps, by_name, label, f"{at}.{name}", step.name)
        _check_input_names(step, by_name[step.model], label, at)
    outputs = spec.outputs if isinstance(spec.outputs, Mapping) else {"": spec.outputs}
    for name, ref in outputs.items():
        at = f"{where}.outputs" + (f".{name}" if name else "")
        if ref.source == REQUEST:
            raise _fail(
                f"the answer cannot come from the request ({ref}); name a step's output",
                label,
                at,
            )
        _check_reference(ref, steps, by_name, label, at, "the answer")
    try:
        step_order(spec.steps)
    except ValueError as e:
        raise _fail(
            f"{e}; make each step read only the request or steps that do not read it",
            label,
            f"{where}.steps",
        ) from None


def _check_member(
    owner: DeclaredModel,
    step: Step,
    by_name: Mapping[str, DeclaredModel],
    label: str,
    at: str,
) -> None:
    member = by_name.get(step.model)
    if member is None or member.name == owner.name:
        what = "is this composed model itself" if member else "is not configured"
        raise _fail(
            f"step {step.name!r} calls model {step.model!r}, which {what}; configured models "
            f"are {sorted(by_name)}: fix `model` or add that model to `models:`",
            label,
            f"{at}.model",
        )
    if step.version is None:
        return
    if member.composition is not None:
        exists = step.version in member.composition.versions
    elif member.versions is not None:
        exists = step.version in member.versions
    else:
        exists = (member.repository / step.version).is_dir()
    if not exists:
        raise _fail(
            f"step {step.name!r} pins version {step.version!r} of model {step.model!r}, which "
            f"has no such version; pin one it has (see {member.repository}) or drop `version`",
            label,
            f"{at}.version",
        )


def _check_reference(
    ref: Reference,
    steps: Mapping[str, Step],
    by_name: Mapping[str, DeclaredModel],
    label: str,
    at: str,
    reader: str,
) -> None:
    if ref.source == REQUEST:
        return
    source = steps.get(ref.source)
    if source is None:
        raise _fail(
            f"{reader!r} reads {str(ref)!r}, but there is no step {ref.source!r}; use "
            f"`request.<field>` or one of the steps {sorted(steps)}",
            label,
            at,
        )
    declared = [spec.name for spec in by_name[source.model].outputs]
    if ref.field is not None and declared and ref.field not in declared:
        raise _fail(
            f"{reader!r} reads output {ref.field!r} of step {ref.source!r}, but model "
            f"{source.model!r} declares outputs {declared}; use one of them",
            label,
            at,
        )


def _check_input_names(step: Step, member: DeclaredModel, label: str, at: str) -> None:
    declared = {spec.name for spec in member.inputs}
    if not declared or step.inputs is None:
        return
    unknown = sorted(set(step.inputs) - declared)
    missing = sorted(declared - set(step.inputs))
    if unknown or missing:
        raise _fail(
            f"step {step.name!r} maps inputs {sorted(step.inputs)} but model {step.model!r} "
            f"declares inputs {sorted(declared)} (unknown: {unknown}, missing: {missing}); "
            "map exactly the declared inputs",
            label,
            at,
        )


def _check_ensemble(spec: EnsembleVersion, label: str, where: str) -> None:
    if spec.combiner == "custom" and spec.function is None:
        raise _fail(
            "a custom combiner needs `function: module:function`", label, f"{where}.function"
        )
    if spec.combiner != "custom" and spec.function is not None:
        raise _fail(
            f"`function` is only read by combiner: custom (this one is {spec.combiner!r}); "
            "remove it or set combiner: custom",
            label,
            f"{where}.function",
        )
    if spec.min_members > len(spec.members):
        raise _fail(
            f"min_members {spec.min_members} exceeds the {len(spec.members)} members; lower it",
            label,
            f"{where}.min_members",
        )


def _check_model_cycles(models: Sequence[DeclaredModel], label: str) -> None:
    calls = {
        m.name: {s.model for v in m.composition.versions.values() for s in v.steps}
        for m in models
        if m.composition is not None
    }
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for callee in sorted(calls.get(name, ())):
            if state.get(callee) == 1:
                loop = " -> ".join([*path[path.index(callee) :], callee])
                where = next(m.key_path for m in models if m.name == name)
                raise _fail(
                    f"composed models call each other in a cycle ({loop}); break it by "
                    "calling a plain model instead",
                    label,
                    where,
                )
            if state.get(callee) is None:
                visit(callee, [*path, callee])
        state[name] = 2

    for name in calls:
        if name not in state:
            visit(name, [name])
