"""Dynamic INT8 with one activation scale per row (token), rewritten into the ONNX graph.

ONNX Runtime's dynamic quantization picks *one* activation scale per tensor, from the
minimum and maximum of the whole batch: a request's result then depends on the other
requests it was batched with. Here every ``MatMul``/``Gemm`` with a constant weight becomes::

    amax   = max(max(|x|, axis=-1), 1e-12)                    one range per row (token)
    x_u8   = QuantizeLinear(x / amax, 1/127, 128)             symmetric, zero point 128
    y      = MatMulIntegerToFloat(x_u8, W_s8, w_scale/127) * amax

A row's scale depends on that row alone, so results are the same served alone or in any
batch (integer accumulation is exact), and an outlier token spoils only its own row. The zero
point 128 is a scalar, which ONNX Runtime's fast u8xs8 kernels require; weights are int8,
per output channel by default. Nodes that read the same activation (the query, key and value
projections of attention) share its quantization. ``MatMulIntegerToFloat`` is an ONNX
Runtime operator (``com.microsoft`` domain): the quantized graph is for ONNX Runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servinglib.optimize._deps import require

__all__ = ["PER_TOKEN_OP_TYPES", "rewrite_per_token"]

PER_TOKEN_OP_TYPES = ("MatMul", "Gemm")
_FLOAT = 1  # onnx.TensorProto.FLOAT


@dataclass(frozen=True)
class _Weight:
    """A constant weight as the MatMul right operand [K, N], with its quantization."""

    quantized: str
    scale: str


@dataclass(frozen=True)
class _Plan:
    """How one node is rewritten: ``activation @ (alpha * weight[.T]) (+ bias)``."""

    activation: str
    weight: str
    transposed: bool
    alpha: float
    bias: str | None


class _Rewriter:
    """Builds the replacement nodes and the initializers they share."""

    def __init__(self, onnx: Any, model: Any, *, per_channel: bool, reduce_range: bool) -> None:
        self.onnx = onnx
        self.opset = next(
            (o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17
        )
        self.initializers = {init.name: init for init in model.graph.initializer}
        self.per_channel = per_channel
        self.qmax = 63.0 if reduce_range else 127.0
        self.new_initializers: list[Any] = []
        self._names: set[str] = set()
        self._weights: dict[tuple[str, bool, float], _Weight] = {}
        self._activations: dict[str, tuple[str, str]] = {}

    def constant(self, name: str, value: np.ndarray) -> str:
        if name not in self._names:
            self.new_initializers.append(self.onnx.numpy_helper.from_array(value, name))
            self._names.add(name)
        return name

    def weight(self, plan: _Plan) -> _Weight:
        """int8 weight and its scale, the activation's 1/127 folded in."""
        key = (plan.weight, plan.transposed, plan.alpha)
        if key not in self._weights:
            w = self.onnx.numpy_helper.to_array(self.initializers[plan.weight]).astype(np.float32)
            w = (w.T if plan.transposed else w) * np.float32(plan.alpha)
            amax = np.abs(w).max(axis=0) if self.per_channel else np.array(np.abs(w).max())
            scale = np.where(amax > 0, amax / self.qmax, 1.0).astype(np.float32)
            quantized = np.clip(np.round(w / scale), -self.qmax, self.qmax).astype(np.int8)
            index = len(self._weights)
            self._weights[key] = _Weight(
                self.constant(f"{plan.weight}_pt{index}_quantized", quantized),
                self.constant(f"{plan.weight}_pt{index}_scale", (scale / 127.0).astype(np.float32)),
            )
        return self._weights[key]

    def activation(self, name: str) -> tuple[list[Any], str, str]:
        """Nodes quantizing activation ``name`` per row (once), its uint8 and its row range."""
        if name in self._activations:
            return [], *self._activations[name]
        make = self.onnx.helper.make_node
        p = f"{name}_per_token"
        eps = self.constant("per_token_eps", np.array(1e-12, dtype=np.float32))
        step = self.constant("per_token_step", np.array(1.0 / 127.0, dtype=np.float32))
        zero_point = self.constant("per_token_zero_point", np.array(128, dtype=np.uint8))
        if self.opset < 18:
            reduce = make(
                "ReduceMax", [f"{p}_abs"], [f"{p}_amax"], name=f"{p}_amax", keepdims=1, axes=[-1]
            )
        else:
            axes = self.constant("per_token_axes", np.array([-1], dtype=np.int64))
            reduce = make(
                "ReduceMax", [f"{p}_abs", axes], [f"{p}_amax"], name=f"{p}_amax", keepdims=1
            )
        nodes = [
            make("Abs", [name], [f"{p}_abs"], name=f"{p}_abs"),
            reduce,
            make("Max", [f"{p}_amax", eps], [f"{p}_range"], name=f"{p}_range"),
            make("Div", [name, f"{p}_range"], [f"{p}_unit"], name=f"{p}_unit"),
            make("QuantizeLinear", [f"{p}_unit", step, zero_point], [f"{p}_u8"], name=f"{p}_u8"),
        ]
        self._activations[name] = (f"{p}_u8", f"{p}_range")
        return nodes, f"{p}_u8", f"{p}_range"

    def replace(self, node: Any, plan: _Plan) -> list[Any]:
        make = self.onnx.helper.make_node
        w = self.weight(plan)
        nodes, quantized, row_range = self.activation(plan.activation)
        p = f"{node.name or node.output[0]}_per_token"
        one = self.constant("per_token_one", np.array(1.0, dtype=np.float32))
        zero_point = self.constant("per_token_zero_point", np.array(128, dtype=np.uint8))
        output = f"{p}_y" if plan.bias is not None else node.output[0]
        nodes += [
            make(
                "MatMulIntegerToFloat",
                [quantized, w.quantized, one, w.scale, zero_point],
                [f"{p}_float"],
                name=f"{p}_matmul",
                domain="com.microsoft",
            ),
            make("Mul", [f"{p}_float", row_range], [output], name=f"{p}_rescale"),
        ]
        if plan.bias is not None:
            nodes.append(make("Add", [output, plan.bias], [node.output[0]], name=f"{p}_bias"))
        return nodes


def rewrite_per_token(
    model: Any,
    *,
    per_channel: bool = True,
    reduce_range: bool = False,
    exclude_nodes: Sequence[str] = (),
    exclude_op_types: Sequence[str] = (),
) -> tuple[Any, int]:
    """Rewrite ``model`` (an ``onnx.ModelProto``) in place; returns it and the nodes rewritten."""
    onnx = require("onnx", "per-token quantization")
    graph = model.graph
    rewriter = _Rewriter(onnx, model, per_channel=per_channel, reduce_range=reduce_range)
    rewritten = 0
    nodes: list[Any] = []
    for node in graph.node:
        plan = _plan(node, rewriter.initializers, exclude_nodes, exclude_op_types)
        if plan is None:
            nodes.append(node)
        else:
            nodes += rewriter.replace(node, plan)
            rewritten += 1
    if not rewritten:
        return model, 0
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(rewriter.new_initializers)
    used = {name for node in graph.node for name in node.input}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return model, rewritten


def _plan(
    node: Any,
    initializers: dict[str, Any],
    exclude_nodes: Sequence[str],
    exclude_op_types: Sequence[str],
) -> _Plan | None:
    """How ``node`` is rewritten, or None when it is left alone."""
    if node.op_type not in PER_TOKEN_OP_TYPES or node.op_type in exclude_op_types:
        return None
    if node.name in exclude_nodes or node.domain not in ("", "ai.onnx"):
        return None
    if len(node.input) < 2 or node.input[0] in initializers:
        return None
    weight = initializers.get(node.input[1])
    if weight is None or weight.data_type != _FLOAT or len(weight.dims) != 2:
        return None
    if node.op_type == "MatMul":
        return _Plan(node.input[0], node.input[1], False, 1.0, None)
    attrs = {a.name: a for a in node.attribute}
    if "transA" in attrs and attrs["transA"].i:
        return None
    beta = attrs["beta"].f if "beta" in attrs else 1.0
    alpha = attrs["alpha"].f if "alpha" in attrs else 1.0
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if bias is not None and beta != 1.0:
        return None
    transposed = bool(attrs["transB"].i) if "transB" in attrs else False
    return _Plan(node.input[0], node.input[1], transposed, alpha, bias)
