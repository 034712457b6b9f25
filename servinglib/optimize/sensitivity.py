"""Rank the nodes whose quantization costs the most accuracy, to leave them in float.

For each ``MatMul``, ``Gemm`` and ``Conv`` with a constant weight, the FP32 model is run on a
few samples with the node's activation input exposed; the node's INT8 error is then simulated
in NumPy, in isolation (its input exact, only its own quantization applied):

* ``MatMul``/``Gemm``: the relative error of the product ``Q(x) @ Q(W)`` against ``x @ W``;
* ``Conv``: the relative quantization error of its input plus that of its weight;
* ``Gather`` of a constant table (embeddings): the relative error of the rows it gathers,
  the table quantized with one scale (what ONNX Runtime does to it).

Activations are quantized as the method would: one scale per tensor for ``dynamic``, per row
for ``dynamic-per-token``, and one scale over all samples for ``static`` (what calibration
sees). Nodes with large errors are typically those fed by outlier-heavy activations, such as
the output projection of a transformer's feed-forward block, after GELU.

Example::

    ranked = rank_sensitive_nodes(Path("model.onnx"), samples.feeds, options)
    options = options.excluding([node.name for node in ranked[:4]])
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.optimize._deps import require
from servinglib.optimize.quantize import QuantizeOptions
from servinglib.optimize.samples import Feed

__all__ = ["NodeSensitivity", "changed_nodes", "rank_sensitive_nodes"]

_OP_TYPES = ("MatMul", "Gemm", "Conv", "Gather")
_FLOAT = 1  # onnx.TensorProto.FLOAT


@dataclass(frozen=True)
class NodeSensitivity:
    """Simulated relative INT8 error of one node."""

    name: str
    op_type: str
    error: float


@dataclass(frozen=True)
class _Target:
    name: str
    op_type: str
    activation: str
    weight: np.ndarray  # MatMul right operand [K, N], or the Conv kernel


def _targets(model: Any, numpy_helper: Any, options: QuantizeOptions) -> list[_Target]:
    initializers = {init.name: init for init in model.graph.initializer}
    targets = []
    for node in model.graph.node:
        if node.op_type not in _OP_TYPES or node.op_type in options.exclude_op_types:
            continue
        if node.name in options.exclude_nodes or len(node.input) < 2:
            continue
        activation, weight_name = node.input[0], node.input[1]
        if node.op_type == "Gather":  # data (the table) first, then the indices
            activation, weight_name = node.input[1], node.input[0]
        if activation in initializers or weight_name not in initializers:
            continue
        if initializers[weight_name].data_type != _FLOAT:
            continue
        weight = numpy_helper.to_array(initializers[weight_name]).astype(np.float32)
        attrs = {a.name: a for a in node.attribute}
        if node.op_type == "Gemm":
            if "transA" in attrs and attrs["transA"].i:
                continue
            if "transB" in attrs and attrs["transB"].i:
                weight = weight.T
        if node.op_type in ("MatMul", "Gemm") and weight.ndim != 2:
            continue
        targets.append(_Target(node.name, node.op_type, activation, weight))
    return targets


def _quantize_activation(x: np.ndarray, method: str, low: float, high: float) -> np.ndarray:
    if method == "dynamic-per-token":
        row_scale = np.maximum(np.abs(x).max(axis=-1, keepdims=True), 1e-12) / 127.0
        return np.asarray(np.round(x / row_scale) * row_scale)
    if method == "dynamic":
        low, high = float(x.min()), float(x.max())
    low, high = min(low, 0.0), max(high, 0.0)
    scale = (high - low) / 255.0 or 1.0
    zero = np.round(-low / scale)
    return np.asarray((np.clip(np.round(x / scale) + zero, 0, 255) - zero) * scale)


def _quantize_weight(w: np.ndarray, options: QuantizeOptions) -> np.ndarray:
    qmax = 63.0 if options.reduce_range else 127.0
    if options.per_channel:
        # output channels: the last axis of a MatMul weight, the first of a Conv kernel
        axis = tuple(range(w.ndim - 1)) if w.ndim == 2 else tuple(range(1, w.ndim))
        amax = np.abs(w).max(axis=axis, keepdims=True)
    else:
        amax = np.array(np.abs(w).max())
    scale = np.where(amax > 0, amax / qmax, 1.0)
    return np.clip(np.round(w / scale), -qmax, qmax) * scale


def _relative(approx: np.ndarray, exact: np.ndarray) -> float:
    norm = float(np.linalg.norm(exact))
    return float(np.linalg.norm(approx - exact)) / norm if norm else 0.0


def rank_sensitive_nodes(
    model_path: Path, feeds: Sequence[Feed], options: QuantizeOptions, *, max_samples: int = 32
) -> list[NodeSensitivity]:
    """Quantizable nodes of ``model_path``, most sensitive first, for ``options.method``."""
    onnx = require("onnx", "sensitivity analysis")
    ort = require("onnxruntime", "sensitivity analysis")
    model = onnx.load(str(model_path))
    targets = _targets(model, onnx.numpy_helper, options)
    if not targets:
        return []
    graph_inputs = {value.name for value in model.graph.input}
    exposed = sorted({t.activation for t in targets} - graph_inputs)
    outputs = {o.name for o in model.graph.output}
    types = {t.activation: onnx.TensorProto.FLOAT for t in targets}
    if any(t.op_type == "Gather" for t in targets):
        inferred = onnx.shape_inference.infer_shapes(model).graph.value_info
        types.update({v.name: v.type.tensor_type.elem_type for v in inferred})
    for name in exposed:
        if name not in outputs:
            model.graph.output.append(onnx.helper.make_tensor_value_info(name, types[name], None))
    with tempfile.TemporaryDirectory(prefix="servinglib-sensitivity-") as tmp:
        probe = Path(tmp) / "probe.onnx"
        onnx.save(model, str(probe))
        session = ort.InferenceSession(str(probe), providers=["CPUExecutionProvider"])
        runs = [
            {
                **feed,
                **dict(zip(exposed, session.run(exposed, feed) if exposed else [], strict=True)),
            }
            for feed in feeds[:max_samples]
        ]
    ranges = {
        t.activation: (
            min(float(r[t.activation].min()) for r in runs),
            max(float(r[t.activation].max()) for r in runs),
        )
        for t in targets
        if t.op_type != "Gather"
    }
    ranked = []
    for target in targets:
        if target.op_type == "Gather":
            table = _quantize_weight(target.weight, replace(options, per_channel=False))
            errors = [
                _relative(np.take(table, idx, axis=0), np.take(target.weight, idx, axis=0))
                for idx in (run[target.activation].astype(np.int64) for run in runs)
            ]
            ranked.append(NodeSensitivity(target.name, target.op_type, float(np.mean(errors))))
            continue
        quantized_w = _quantize_weight(target.weight, options)
        errors = []
        for run in runs:
            x = run[target.activation].astype(np.float32)
            qx = _quantize_activation(x, options.method, *ranges[target.activation])
            if target.op_type == "Conv":
                errors.append(_relative(qx, x) + _relative(quantized_w, target.weight))
            else:
                errors.append(_relative(qx @ quantized_w, x @ target.weight))
        ranked.append(NodeSensitivity(target.name, target.op_type, float(np.mean(errors))))
    return sorted(ranked, key=lambda n: n.error, reverse=True)


def changed_nodes(original: Path, quantized: Path) -> set[str]:
    """Names of the nodes of ``original`` that quantizing into ``quantized`` replaced or rewired.

    A quantizer either replaces a node (``MatMul`` → ``MatMulInteger``: the name is gone) or,
    in QDQ format, feeds it from ``DequantizeLinear`` (same name, other inputs). Excluding any
    other node from quantization changes nothing.
    """
    onnx = require("onnx", "sensitivity analysis")
    before = onnx.load(str(original), load_external_data=False).graph.node
    after = {
        node.name: list(node.input)
        for node in onnx.load(str(quantized), load_external_data=False).graph.node
    }
    return {
        node.name
        for node in before
        if node.name and (node.name not in after or after[node.name] != list(node.input))
    }
