"""In what order things run: a version's steps in waves, and models members first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from servinglib.compose.spec import Composition, Step

__all__ = ["called_models", "load_order", "step_order"]


class _Composable(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def composition(self) -> Composition | None: ...
    @property
    def runtime_options(self) -> Mapping[str, Any]: ...


M = TypeVar("M", bound=_Composable)


def step_order(steps: Sequence[Step]) -> list[list[Step]]:
    """Steps in waves: each wave needs only earlier waves (its steps can run at once).

    Raises:
        ValueError: the steps form a cycle; the message names the steps in it.
    """
    done: set[str] = set()
    left = list(steps)
    waves: list[list[Step]] = []
    while left:
        wave = [s for s in left if s.sources() <= done]
        if not wave:
            names = ", ".join(repr(s.name) for s in left)
            raise ValueError(f"steps {names} wait for each other (a cycle)")
        waves.append(wave)
        done |= {s.name for s in wave}
        left = [s for s in left if s.name not in done]
    return waves


def _calls(model: _Composable) -> set[str]:
    fallback = model.runtime_options.get("fallback_model")  # runtime: precomputed
    if model.composition is None:
        return set() if fallback is None else {str(fallback)}
    return {step.model for spec in model.composition.versions.values() for step in spec.steps}


def called_models(models: Sequence[M], name: str) -> list[M]:
    """The models ``name`` calls, directly or through others, in :func:`load_order`."""
    by_name = {m.name: m for m in models}
    wanted: set[str] = set()
    todo = list(_calls(by_name[name])) if name in by_name else []
    while todo:
        called = todo.pop()
        if called in by_name and called not in wanted:
            wanted.add(called)
            todo.extend(_calls(by_name[called]))
    return [m for m in load_order(models) if m.name in wanted]


def load_order(models: Sequence[M]) -> list[M]:
    """Plain models in their order, then the others, each after the models it calls.

    (Composed models call their steps; a ``runtime: precomputed`` model its fallback.)
    """
    order = [m for m in models if not _calls(m)]
    placed = {m.name for m in order}
    left = [m for m in models if _calls(m)]
    while left:
        ready = [m for m in left if _calls(m) <= placed] or left  # a cycle: config refuses it
        order.append(ready[0])
        placed.add(ready[0].name)
        left.remove(ready[0])
    return order
