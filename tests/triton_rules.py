"""The checks Triton's model loader runs on a ``config.pbtxt``, for tests of servinglib's.

Parsing a configuration as Triton's ``ModelConfig`` protobuf only checks field names and
types; the loader then refuses more (``model_config_utils.cc``: ``ValidateIOShape`` and
``ValidateEnsembleSchedulingConfig``). These are those rules, with Triton's messages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

WILDCARD = -1
SCHEDULING = ("dynamic_batching", "sequence_batching", "ensemble_scheduling")  # a oneof


def loader_problems(config: Mapping[str, Any]) -> list[str]:
    """What Triton's loader would refuse in ``config`` (empty: it loads)."""
    name = config.get("name", "")
    problems = [
        f"{kind} '{io.get('name', '')}' of '{name}': {problem}"
        for kind in ("input", "output")
        for io in config.get(kind, [])
        for problem in _io_problems(io, int(config.get("max_batch_size", 0)))
    ]
    chosen = [key for key in SCHEDULING if key in config]
    if len(chosen) > 1:
        problems.append(f"'{name}' sets {chosen}, which are one choice (scheduling_choice)")
    if "ensemble_scheduling" in config:
        problems += _ensemble_problems(config)
    return problems


def _count(dims: Sequence[int]) -> int:
    """Triton's GetElementCount: -1 with a wildcard, 0 for no dimension."""
    if WILDCARD in dims:
        return WILDCARD
    return math.prod(dims) if dims else 0


def _io_problems(io: Mapping[str, Any], max_batch_size: int) -> list[str]:
    problems = []
    if not io.get("name"):
        problems.append("must specify 'name'")
    if io.get("data_type", "TYPE_INVALID") == "TYPE_INVALID":
        problems.append("must specify 'data_type'")
    dims = list(io.get("dims", []))
    if not dims:
        problems.append("must specify 'dims'")
    if any(d < 1 and d != WILDCARD for d in dims):
        problems.append("dimension must be integer >= 1, or -1")
    if "reshape" in io:
        shape = list(io["reshape"].get("shape", []))
        if not shape and max_batch_size == 0:
            problems.append("cannot have empty reshape for non-batching model")
        if any(d < 1 and d != WILDCARD for d in shape):
            problems.append("reshape dimensions must be integer >= 1, or -1")
        dims_size, reshape_size = _count(dims), _count(shape)
        if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
            problems.append("has different size for dims and reshape")
    return problems


def _ensemble_problems(config: Mapping[str, Any]) -> list[str]:
    name = config.get("name", "")
    problems = []
    if config.get("platform") != "ensemble":
        problems.append(f"ensemble scheduling cannot be set for '{name}' (platform not ensemble)")
    if config.get("instance_group"):
        problems.append(f"instance group should not be specified for ensemble '{name}'")
    steps = config["ensemble_scheduling"].get("step", [])
    if not steps:
        return [*problems, f"must specify 'step' for ensemble '{name}'"]
    produced: set[str] = set()
    read_by: dict[str, list[int]] = {}
    graph = []  # BuildEnsembleGraph's refusals: the data flow is not checked after them
    for index, step in enumerate(steps):
        for key in ("model_name", "input_map", "output_map"):
            if not step.get(key):
                graph.append(f"must specify '{key}' in step {index} of ensemble '{name}'")
        for tensor in step.get("output_map", {}).values():
            if tensor in produced:
                graph.append(f"ensemble tensor '{tensor}' can appear in an output map only once")
            produced.add(tensor)
        for tensor in step.get("input_map", {}).values():
            read_by.setdefault(tensor, []).append(index)
    if graph:
        return problems + graph
    ready = {io["name"] for io in config.get("input", [])}
    for tensor in ready:
        if tensor not in read_by:
            problems.append(f"ensemble input '{tensor}' for ensemble '{name}' is not used")
    progress = True
    done: set[int] = set()
    while progress:  # a step runs once every tensor it reads is ready
        progress = False
        for index, step in enumerate(steps):
            if index not in done and set(step["input_map"].values()) <= ready:
                ready |= set(step["output_map"].values())
                done.add(index)
                progress = True
    outputs = {io["name"] for io in config.get("output", [])}
    for tensor in sorted(outputs):
        if tensor not in produced:
            problems.append(f"ensemble output '{tensor}' for ensemble '{name}' is not used")
        elif tensor not in ready:
            problems.append(f"output '{tensor}' for ensemble '{name}' is not written")
    for tensor in sorted((produced | set(read_by)) - outputs):
        if tensor not in ready or tensor not in read_by:
            problems.append(f"ensemble tensor '{tensor}' is unused in ensemble '{name}'")
    return problems
