"""The Triton model configuration of a servinglib model (``/v2/models/{m}/config``).

Triton's tools read this document to drive a model: ``perf_analyzer -b N`` refuses a model
whose ``max_batch_size`` is 0, and generates input shapes from ``dims`` (without the batch
dimension when ``max_batch_size`` > 0). So the document must say what the server does:

- ``max_batch_size`` and ``dynamic_batching`` come from the model's ``batching:`` settings
  (0 and no block when the model does not batch);
- ``platform`` / ``backend`` name the runtime: ONNX Runtime, TorchScript, or a Python class;
- ``dims`` are never empty (Triton's loader refuses it): a tensor of one value per row is
  ``dims: [1]`` with ``reshape: {shape: []}`` (``dims: [1]`` without batching);
- a composed model is an ``ensemble`` whose steps map their inputs and outputs (see
  :mod:`servinglib.compose.triton`), with neither instance groups nor dynamic batching;
- with batching, ``dims`` leave out the leading batch dimension. Tensors whose declared
  shape starts with -1 (runtime models) carry their rows already; for the other models
  (Python classes that answer one item per call) the server splits a leading batch
  dimension into rows, one batcher request each (see :func:`splits_rows`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from servinglib.compose.triton import COMBINER_SUFFIX
from servinglib.config.spec import BatchPolicy
from servinglib.model import TensorSpec
from servinglib.wire.batch_rows import splits_rows
from servinglib.wire.tensor_bounds import dimension_bounds

__all__ = ["tensor_metadata", "triton_model_config"]

# platform of the runtime -> (Triton platform, Triton backend)
_RUNTIMES = {
    "onnxruntime_onnx": ("onnxruntime_onnx", "onnxruntime"),
    "pytorch_libtorch": ("pytorch_libtorch", "pytorch"),
}
_TRITON_TYPES = {"BYTES": "TYPE_STRING"}


def tensor_metadata(spec: TensorSpec, rows: bool) -> dict[str, Any]:
    """A tensor of ``/v2/models/{m}`` metadata; ``rows``: the model splits a batch dimension.

    Triton's metadata of a batching model shows the batch dimension as a leading -1 (its
    tools drop it again when ``max_batch_size`` > 0), so a row-splitting model declares it.
    """
    shape = [-1, *spec.shape] if rows else list(spec.shape)
    return {"name": spec.name, "datatype": spec.datatype, "shape": shape}


def triton_model_config(
    name: str,
    instance: object,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    batching: BatchPolicy | None,
    versions: list[str],
    default_version: str,
    input_schema: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Triton's ``model_config`` JSON for one model, true to its runtime and batching.

    ``max_batch_size`` is the batching policy's, or fewer when ``input_schema`` bounds the
    rows one request may carry (the outermost ``maxItems`` of a batch-first input).
    """
    runtime = getattr(instance, "platform", "")
    platform, backend = _RUNTIMES.get(runtime if isinstance(runtime, str) else "", ("", "python"))
    split = splits_rows(inputs, batching)

    def tensor(spec: TensorSpec) -> dict[str, Any]:
        dims = list(spec.shape)
        if batching is not None and not split and dims and dims[0] == -1:
            dims = dims[1:]  # the batch dimension is implied by max_batch_size
        data_type = _TRITON_TYPES.get(spec.datatype, f"TYPE_{spec.datatype}")
        if not dims and batching is not None:  # one value per row: [1], reshaped to a scalar
            return {
                "name": spec.name,
                "data_type": data_type,
                "dims": [1],
                "reshape": {"shape": []},
            }
        if not dims:  # a scalar of a model that does not batch
            return {"name": spec.name, "data_type": data_type, "dims": [1]}
        return {"name": spec.name, "data_type": data_type, "dims": dims}

    policy: dict[str, Any] = (
        {"specific": {"versions": [int(v) for v in versions]}}
        if all(v.isdigit() for v in versions)
        else {"all": {}}
    )
    config: dict[str, Any] = {
        "name": name,
        "platform": platform,
        "backend": backend,
        "max_batch_size": 0 if batching is None else _max_rows(batching, inputs, input_schema),
        "input": [tensor(spec) for spec in inputs],
        "output": [tensor(spec) for spec in outputs],
        "version_policy": policy,
        "instance_group": [{"name": name, "kind": "KIND_CPU", "count": 1}],
        "parameters": {"servinglib_default_version": {"string_value": default_version}},
    }
    scheduling = getattr(instance, "ensemble_scheduling", None)
    if callable(scheduling):  # Triton's tools read a composed model as an ensemble
        # Triton refuses instance groups on an ensemble, and its scheduling is one of
        # dynamic_batching or ensemble_scheduling (the members batch, in their own lanes)
        del config["instance_group"]
        config.update(platform="ensemble", backend="", ensemble_scheduling=scheduling())
        return config
    if batching is not None:
        config["dynamic_batching"] = {
            "preferred_batch_size": list(batching.preferred_batch_sizes),
            "max_queue_delay_microseconds": batching.max_queue_delay_us,
            "preserve_ordering": batching.preserve_ordering,
            "default_queue_policy": {"max_queue_size": batching.max_queue_size},
        }
    return config


def _max_rows(
    batching: BatchPolicy, inputs: Sequence[TensorSpec], input_schema: Mapping[str, Any] | None
) -> int:
    """The rows one request may carry: the batch size, or an input schema's tighter bound."""
    limit = batching.max_batch_size
    for spec in inputs:
        sizes = dimension_bounds(input_schema, spec.name)
        if spec.shape and spec.shape[0] == -1 and len(sizes) == len(spec.shape):
            high = sizes[0][1]
            if high is not None:
                limit = min(limit, high)
    return limit


def combiner_config_of(
    model: str, known: Collection[str], instance_of: Callable[[str], object]
) -> dict[str, Any] | None:
    """The configuration of ``<ensemble>_combiner``, the combiner step of an ensemble's
    scheduling, when ``model`` names one (and no configured model of its own); else None.

    Triton's tools (perf_analyzer) read the configuration of every step, over REST and gRPC.
    """
    base = model.removesuffix(COMBINER_SUFFIX)
    if base == model or model in known or base not in known:
        return None
    config = getattr(instance_of(base), "combiner_config", None)
    return config() if callable(config) else None
