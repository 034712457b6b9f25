"""The ``pipeline:`` and ``ensemble:`` keys of a model in servinglib.yaml, parsed.

A pipeline version is a list of steps; each step names a configured model (and optionally
a version), maps its inputs from the request (``request.<field>``) or an earlier step's
outputs (``<step>.<output>``), and the version names which outputs form the answer::

    pipeline:
      "1":
        steps:
          - {name: tokenize, model: tokenizer, inputs: {text: request.text}}
          - {name: embed, model: minilm, version: "1",
             inputs: {input_ids: tokenize.input_ids, attention_mask: tokenize.attention_mask}}
        outputs: {embedding: embed.sentence_embedding}

An ensemble version lists members, a combiner and what a failing member does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "COMBINERS",
    "FAILURE_POLICIES",
    "REQUEST",
    "Composition",
    "EnsembleVersion",
    "Member",
    "PipelineVersion",
    "Reference",
    "Step",
    "parse_composition",
]

REQUEST = "request"  # the source name of the request's own features in input mappings
COMBINERS = ("mean", "weighted_mean", "vote", "max", "custom")
FAILURE_POLICIES = ("fail", "answer_from_rest")


@dataclass(frozen=True)
class Reference:
    """Where a value comes from: ``source`` is ``request`` or a step name; ``field`` None = all."""

    source: str
    field: str | None

    @classmethod
    def parse(cls, text: str) -> Reference:
        """``"embed.sentence_embedding"`` -> Reference("embed", "sentence_embedding")."""
        source, _, name = text.partition(".")
        return cls(source, name or None)

    def __str__(self) -> str:
        return self.source if self.field is None else f"{self.source}.{self.field}"


@dataclass(frozen=True)
class Step:
    """One call of another model; ``inputs`` maps its input names to references."""

    name: str
    model: str
    version: str | None = None
    inputs: Mapping[str, Reference] | None = None  # None: the whole request

    def sources(self) -> set[str]:
        """The step names (never ``request``) this step waits for."""
        refs = (self.inputs or {}).values()
        return {ref.source for ref in refs if ref.source != REQUEST}


@dataclass(frozen=True)
class PipelineVersion:
    """Steps, and the answer: output name -> reference (or one reference: that value)."""

    steps: tuple[Step, ...]
    outputs: Mapping[str, Reference] | Reference


@dataclass(frozen=True)
class Member:
    """One model of an ensemble; ``weight`` counts in ``weighted_mean`` and ``vote``."""

    name: str
    model: str
    version: str | None = None
    weight: float = 1.0

    def as_step(self) -> Step:
        """An ensemble member is a step fed the whole request."""
        return Step(self.name, self.model, self.version)


@dataclass(frozen=True)
class EnsembleVersion:
    """Members called at once, their answers combined.

    Attributes:
        combiner: one of :data:`COMBINERS`.
        function: ``module:function`` of a ``custom`` combiner.
        on_member_failure: ``fail`` the request, or ``answer_from_rest`` (counted).
        min_members: answers needed at least when answering from the rest.
    """

    members: tuple[Member, ...]
    combiner: str = "mean"
    function: str | None = None
    on_member_failure: str = "fail"
    min_members: int = 1

    @property
    def steps(self) -> tuple[Step, ...]:
        """The members as steps (for the scheduler and the Triton config)."""
        return tuple(m.as_step() for m in self.members)


@dataclass(frozen=True)
class Composition:
    """A composed model: ``kind`` is ``pipeline`` or ``ensemble``; one spec per version."""

    kind: str
    versions: Mapping[str, PipelineVersion | EnsembleVersion] = field(default_factory=dict)


def _refs(raw: Mapping[str, str]) -> dict[str, Reference]:
    return {name: Reference.parse(text) for name, text in raw.items()}


def _pipeline(raw: Mapping[str, Any]) -> PipelineVersion:
    steps = tuple(
        Step(
            name=s.get("name", s["model"]),
            model=s["model"],
            version=s.get("version"),
            inputs=_refs(s["inputs"]) if "inputs" in s else None,
        )
        for s in raw["steps"]
    )
    outputs = raw.get("outputs", steps[-1].name)
    return PipelineVersion(
        steps, Reference.parse(outputs) if isinstance(outputs, str) else _refs(outputs)
    )


def _ensemble(raw: Mapping[str, Any]) -> EnsembleVersion:
    members = tuple(
        Member(
            name=m.get("name", f"{m['model']}:{m.get('version', 'default')}"),
            model=m["model"],
            version=m.get("version"),
            weight=float(m.get("weight", 1.0)),
        )
        for m in raw["members"]
    )
    keys = ("combiner", "function", "on_member_failure", "min_members")
    return EnsembleVersion(members, **{k: raw[k] for k in keys if k in raw})


def parse_composition(entry: Mapping[str, Any]) -> Composition | None:
    """The composition of a schema-valid model entry, or None for a plain model."""
    for kind, parse in (("pipeline", _pipeline), ("ensemble", _ensemble)):
        if kind in entry:
            versions = {v: parse(spec) for v, spec in entry[kind].items()}
            return Composition(kind, versions)
    return None
