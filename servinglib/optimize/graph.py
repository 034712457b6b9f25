"""Offline graph optimization: let ONNX Runtime rewrite a graph once and save the result.

Levels, as ONNX Runtime defines them:

* ``basic``: constant folding, redundant node elimination; portable, safe before quantization.
* ``extended``: fusions (GELU, LayerNorm, attention, MatMul+Add...) into ``com.microsoft``
  operators; portable across ONNX Runtime builds, but the quantizer cannot read those fused
  operators, so quantize the ``basic`` graph and let the session fuse at load.
* ``all``: also hardware-specific layouts (e.g. NCHWc for the CPU it ran on); save it only
  for the machine type that will serve it.

Example::

    result = optimize_graph(Path("model.onnx"), Path("model.basic.onnx"), level="basic")
    print(result.nodes_before, "->", result.nodes_after)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from servinglib.optimize._deps import require
from servinglib.optimize._session import GRAPH_LEVELS, graph_level
from servinglib.optimize.errors import OptimizeError

__all__ = ["GRAPH_LEVELS", "GraphResult", "count_ops", "optimize_graph"]


@dataclass(frozen=True)
class GraphResult:
    """Node counts of a graph before and after optimization."""

    source: Path
    path: Path
    level: str
    nodes_before: int
    nodes_after: int
    ops_after: dict[str, int]


def count_ops(path: Path) -> Counter[str]:
    """How many nodes of each operator type the graph at ``path`` has."""
    onnx = require("onnx", "reading an ONNX model")
    model = onnx.load(str(path), load_external_data=False)
    return Counter(node.op_type for node in model.graph.node)


def optimize_graph(source: Path, destination: Path, *, level: str = "basic") -> GraphResult:
    """Run ONNX Runtime's graph optimizations at ``level`` and save the graph to ``destination``.

    Raises:
        OptimizeError: unknown level, or ONNX Runtime cannot load ``source``.
    """
    if level not in GRAPH_LEVELS or level == "disable":
        raise OptimizeError(
            f"graph optimization level {level!r} is not one of {list(GRAPH_LEVELS[1:])}"
        )
    if source.resolve() == destination.resolve():
        raise OptimizeError(f"{destination} is the source model; save to a new file")
    ort = require("onnxruntime", "graph optimization")
    options = ort.SessionOptions()
    options.graph_optimization_level = graph_level(ort, level)
    options.optimized_model_filepath = str(destination)
    options.log_severity_level = 3
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        ort.InferenceSession(str(source), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise OptimizeError(f"ONNX Runtime cannot optimize {source}: {e}") from e
    before, after = count_ops(source), count_ops(destination)
    return GraphResult(
        source=source,
        path=destination,
        level=level,
        nodes_before=sum(before.values()),
        nodes_after=sum(after.values()),
        ops_after=dict(after.most_common()),
    )
