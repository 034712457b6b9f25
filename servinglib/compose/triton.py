"""A composed version as Triton's ``ensemble_scheduling``, in a form Triton's loader accepts.

Triton's loader (``ValidateEnsembleSchedulingConfig``) wants every step to map at least one
input and one output, every ensemble tensor produced once and read (ensemble outputs
aside), every ensemble input read, and every ensemble output written. So:

- a step fed the whole request maps each declared ensemble input to itself;
- a step output read by a later step is the tensor ``step.output`` (the ensemble output's
  own name when it is also an answer); a step read whole is the tensor ``step``;
- an ensemble's members each write ``member.output`` for every declared output, and a last
  step, the combiner (model ``<ensemble>_combiner``, whose configuration
  :func:`combiner_config` gives, as Triton's tools fetch every step's), reads them all and
  writes the ensemble's outputs.

Declare the composed model's ``inputs:`` and ``outputs:``: without them there is nothing to
map the request and the answer to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servinglib.compose.spec import REQUEST, EnsembleVersion, PipelineVersion, Reference, Step
from servinglib.model import TensorSpec

__all__ = ["COMBINER_SUFFIX", "combiner_config", "ensemble_scheduling"]

COMBINER_SUFFIX = "_combiner"  # the combiner step of ensemble E is the model E_combiner
_WHOLE = "output"  # the output name of a step's whole answer, and of an undeclared answer


def ensemble_scheduling(
    name: str,
    version: str,
    spec: PipelineVersion | EnsembleVersion,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
) -> dict[str, Any]:
    """Triton's ``ensemble_scheduling`` of version ``version`` of ``name``."""
    request = {t.name: t.name for t in inputs} or {REQUEST: REQUEST}
    answer = [t.name for t in outputs] or [_WHOLE]
    if isinstance(spec, EnsembleVersion):
        return {"step": _ensemble_steps(name, version, spec, request, answer)}
    return {"step": _pipeline_steps(spec, request, answer)}


def combiner_config(
    name: str, version: str, spec: EnsembleVersion, outputs: Sequence[TensorSpec]
) -> dict[str, Any]:
    """The Triton configuration of ensemble ``name``'s combiner step (one per version)."""

    def tensor(tensor_name: str, spec: TensorSpec | None) -> dict[str, Any]:
        datatype = "BYTES" if spec is None else spec.datatype
        dims = [1] if spec is None or not spec.shape else list(spec.shape)
        data_type = "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
        return {"name": tensor_name, "data_type": data_type, "dims": dims}

    declared: list[tuple[str, TensorSpec | None]] = [(t.name, t) for t in outputs]
    answer = declared or [(_WHOLE, None)]
    function = spec.function if spec.combiner == "custom" else spec.combiner
    return {
        "name": name + COMBINER_SUFFIX,
        "platform": "servinglib_combiner",
        "backend": "python",
        "max_batch_size": 0,
        "input": [
            tensor(f"{member.name}.{out}", t) for member in spec.members for out, t in answer
        ],
        "output": [tensor(out, t) for out, t in answer],
        "version_policy": {"specific": {"versions": [int(version)]}}
        if version.isdigit()
        else {"all": {}},
        "parameters": {"servinglib_combiner": {"string_value": str(function)}},
    }


def _ensemble_steps(
    name: str,
    version: str,
    spec: EnsembleVersion,
    request: Mapping[str, str],
    answer: Sequence[str],
) -> list[dict[str, Any]]:
    steps = [
        _step(member.as_step(), dict(request), {out: f"{member.name}.{out}" for out in answer})
        for member in spec.members
    ]
    written = {tensor: tensor for step in steps for tensor in step["output_map"].values()}
    combiner = Step(COMBINER_SUFFIX, name + COMBINER_SUFFIX, version)
    steps.append(_step(combiner, written, {out: out for out in answer}))
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
