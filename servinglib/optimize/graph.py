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
from typing import Any

from servinglib.errors import ModelLoadError
from servinglib.optimize._deps import require
from servinglib.optimize._files import StagedOutput, has_external_data
from servinglib.optimize._messages import first_line
from servinglib.optimize._session import open_session
from servinglib.optimize.errors import OptimizeError
from servinglib.runtimes.onnx import GRAPH_LEVELS, session_options

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
    ort = require("onnxruntime", "graph optimization")
    with StagedOutput(destination, source=source) as staged:
        _optimize_into(ort, source, staged.path, level)
        before, after = count_ops(source), count_ops(staged.path)
        # a saved graph that ONNX Runtime cannot load again is no result
        open_session(staged.path, level="disable")
        staged.commit()
    return GraphResult(
        source=source,
        path=destination,
        level=level,
        nodes_before=sum(before.values()),
        nodes_after=sum(after.values()),
        ops_after=dict(after.most_common()),
    )


def _optimize_into(ort: Any, source: Path, target: Path, level: str) -> None:
    try:
        options = session_options(ort, graph_level=level, optimized_model_path=target)
    except ModelLoadError as e:
        raise OptimizeError(str(e)) from e
    options.log_severity_level = 3
    if has_external_data(source):
        # weights stay in a data file next to the new graph, under its own name
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", target.name + ".data"
        )
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
        )
    try:
        ort.InferenceSession(str(source), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise OptimizeError(f"ONNX Runtime cannot optimize {source}: {first_line(e)}") from e
