"""A composed version as Triton's ``ensemble_scheduling``, in a form Triton's loader accepts.

Triton's loader (``ValidateEnsembleSchedulingConfig``) wants every step to map at least one
input and one output, every ensemble tensor produced once and read (ensemble outputs
aside), every ensemble input read, and every ensemble output written. So:

- a step fed the whole request maps each declared ensemble input to itself;
- a step output read by a later step is the tensor ``step.output`` (the ensemble output's
  own name when it is also an answer); a step read whole is the tensor ``step``;
- an ensemble's members each write ``member.output`` for every declared output, and a last
  step, ``servinglib_combiner`` (the combiner, which Triton has no model for), reads them all
  and writes the ensemble's outputs.

Declare the composed model's ``inputs:`` and ``outputs:``: without them there is nothing to
map the request and the answer to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servinglib.compose.spec import REQUEST, EnsembleVersion, PipelineVersion, Reference, Step
from servinglib.model import TensorSpec

__all__ = ["COMBINER_STEP", "ensemble_scheduling"]

COMBINER_STEP = "servinglib_combiner"
_WHOLE = "output"  # the output name of a step's whole answer, and of an undeclared answer


def ensemble_scheduling(
    spec: PipelineVersion | EnsembleVersion,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
) -> dict[str, Any]:
    """Triton's ``ensemble_scheduling`` of one composed version (``{"step": [...]}``)."""
    request = {t.name: t.name for t in inputs} or {REQUEST: REQUEST}
    answer = [t.name for t in outputs] or [_WHOLE]
    if isinstance(spec, EnsembleVersion):
        return {"step": _ensemble_steps(spec, request, answer)}
    return {"step": _pipeline_steps(spec, request, answer)}


def _ensemble_steps(
    spec: EnsembleVersion, request: Mapping[str, str], answer: Sequence[str]
) -> list[dict[str, Any]]:
    steps = [
        _step(member.as_step(), dict(request), {name: f"{member.name}.{name}" for name in answer})
        for member in spec.members
    ]
    written = {tensor: tensor for step in steps for tensor in step["output_map"].values()}
    steps.append(
        {
            "model_name": COMBINER_STEP,
            "model_version": -1,
            "input_map": written,
            "output_map": {name: name for name in answer},
        }
    )
    return steps


def _pipeline_steps(
    spec: PipelineVersion, request: Mapping[str, str], answer: Sequence[str]
) -> list[dict[str, Any]]:
    final = _final_tensors(spec.outputs, answer)

    def tensor(ref: Reference) -> str:
        if ref.source == REQUEST:
            return ref.field or REQUEST
        return final.get(str(ref), str(ref))

    read = {
        str(ref)
        for step in spec.steps
        for ref in (step.inputs or {}).values()
        if ref.source != REQUEST
    }
    steps = []
    for step in spec.steps:
        if step.inputs is None:
            input_map = dict(request)
        else:
            input_map = {name: tensor(ref) for name, ref in step.inputs.items()}
        output_map = {}
        for key in sorted(read | set(final)):
            source, _, field = key.partition(".")
            if source == step.name:
                output_map[field or _WHOLE] = final.get(key, key)
        steps.append(_step(step, input_map, output_map))
    return steps


def _final_tensors(
    outputs: Mapping[str, Reference] | Reference, answer: Sequence[str]
) -> dict[str, str]:
    """``step.field`` (or ``step``) -> the ensemble output it is written as."""
    if isinstance(outputs, Mapping):
        return {str(ref): name for name, ref in outputs.items()}
    if outputs.field is not None:
        return {str(outputs): answer[0] if len(answer) == 1 else outputs.field}
    # the last step's whole answer: each declared output is one of its outputs
    return {f"{outputs.source}.{name}": name for name in answer}


def _step(step: Step, input_map: dict[str, str], output_map: dict[str, str]) -> dict[str, Any]:
    version = step.version
    return {
        "model_name": step.model,
        "model_version": int(version) if version is not None and version.isdigit() else -1,
        "input_map": input_map,
        "output_map": output_map,
    }
