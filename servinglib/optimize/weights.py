"""How much of a quantized model is INT8: the share of its weights stored as 8-bit integers.

A quantizer leaves alone the operators it has no INT8 kernel for: ONNX Runtime's static
(QDQ) quantization has none for ``LSTM`` or ``GRU``, its dynamic quantization none for
``GRU``, so a recurrent classifier comes out a few percent smaller and otherwise FP32. The
share counts weight elements (initializers with two or more axes: matrices, kernels,
embedding tables, recurrent weights); biases, scales and zero points are not weights here.
Below :data:`ESSENTIALLY_FP32` the report warns and names the operator types left float.

Example::

    share = weight_share(Path("int8/model.onnx"))
    print(f"{share.quantized_fraction:.0%} INT8; float: {share.float_op_types}")
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from servinglib.optimize._deps import require

__all__ = ["ESSENTIALLY_FP32", "WeightShare", "weight_share"]

ESSENTIALLY_FP32 = 0.5  # below this share of INT8 weights, the result is called essentially FP32
_INT8 = frozenset({2, 3})  # onnx.TensorProto.UINT8, INT8
_FLOAT = frozenset({1, 10, 11, 16})  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


@dataclass(frozen=True)
class WeightShare:
    """Weight elements stored as INT8 and as float, and the operator types reading float ones."""

    quantized_elements: int
    float_elements: int
    float_op_types: dict[str, int] = field(default_factory=dict)

    @property
    def quantized_fraction(self) -> float:
        """INT8 weight elements / all weight elements (0 for a model without weights)."""
        total = self.quantized_elements + self.float_elements
        return self.quantized_elements / total if total else 0.0

    @property
    def essentially_fp32(self) -> bool:
        """True when less than :data:`ESSENTIALLY_FP32` of the weights are INT8."""
        return self.quantized_fraction < ESSENTIALLY_FP32

    def describe(self) -> str:
        """E.g. ``6 % of weights INT8; left float: LSTM (1)``."""
        text = f"{self.quantized_fraction:.0%} of weights INT8"
        if self.float_op_types:
            listed = ", ".join(f"{op} ({n})" for op, n in self.float_op_types.items())
            text += f"; left float: {listed}"
        return text


def weight_share(path: Path) -> WeightShare:
    """Count the INT8 and float weights of the model at ``path`` (external data not loaded)."""
    onnx = require("onnx", "counting quantized weights")
    graph = onnx.load(str(path), load_external_data=False).graph
    quantized = floating = 0
    float_weights = set()
    for init in graph.initializer:
        if len(init.dims) < 2:
            continue
        size = int(np.prod(init.dims))
        if init.data_type in _INT8:
            quantized += size
        elif init.data_type in _FLOAT:
            floating += size
            float_weights.add(init.name)
    readers: Counter[str] = Counter(
        node.op_type for node in graph.node if any(name in float_weights for name in node.input)
    )
    return WeightShare(quantized, floating, dict(readers.most_common()))
