"""Starter artifacts of version ``1/``, built at generation time so no binary is shipped.

The ``onnx`` and ``torch`` starters are the same tiny linear model,
``y = x @ [[0.5], [0.25]] + 1.0`` on inputs of shape ``[batch, 2]``, whose weights are exact
in float32 so the self-tests of ``test_data.json`` match to the last bit. The ``python``
starter's ``weights.json`` is a template file. The tabular starters are in
:mod:`servinglib_generator.tabular_artifacts`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servinglib_generator.errors import ArtifactError
from servinglib_generator.runtimes import Runtime
from servinglib_generator.tabular_artifacts import TABULAR_ARTIFACTS, build_tabular_model

__all__ = ["BIAS", "WEIGHTS", "build_artifact", "build_onnx_model", "build_torch_model"]

WEIGHTS = (0.5, 0.25)
BIAS = 1.0
# ONNX Runtime 1.17, the oldest servinglib supports, runs opset 17 and IR version 8.
ONNX_OPSET = 17
ONNX_IR_VERSION = 8


def build_artifact(runtime: Runtime, version_dir: Path) -> Path | None:
    """Write the starter artifact of ``runtime`` into ``version_dir``; None for ``python``.

    Raises:
        ArtifactError: the package needed to build it (onnx, torch) is not installed.
    """
    if runtime == "onnx":
        return build_onnx_model(version_dir / "model.onnx")
    if runtime == "torch":
        return build_torch_model(version_dir / "model.pt2")
    if runtime in TABULAR_ARTIFACTS:
        return build_tabular_model(runtime, version_dir)
    return None


def build_onnx_model(path: Path) -> Path:
    """Write the starter graph (input ``x`` float32 ``[batch, 2]``, output ``y`` ``[batch, 1]``)."""
    try:
        import onnx
        from onnx import TensorProto, helper
    except ImportError as e:
        raise ArtifactError(
            "runtime=onnx builds a starter model.onnx with the `onnx` package, which is not "
            "installed; install it with pip install 'servinglib[onnx]' or choose runtime=python"
        ) from e
    weights = helper.make_tensor("W", TensorProto.FLOAT, [2, 1], list(WEIGHTS))
    bias = helper.make_tensor("B", TensorProto.FLOAT, [1], [BIAS])
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "B"], ["y"]),
        ],
        "starter_linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])],
        initializer=[weights, bias],
    )
    model = helper.make_model(
        graph,
        producer_name="servinglib-generate",
        opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
    )
    model.ir_version = ONNX_IR_VERSION
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def build_torch_model(path: Path) -> Path:
    """Write the starter module with ``torch.export`` (``forward(x) -> y``, batch size free).

    ``torch.export`` rather than TorchScript: torch 2.13 deprecates ``torch.jit.script`` and
    ``torch.jit.load``, and servinglib's torch runtime serves ``model.pt2`` as well.
    """
    torch = _import_torch()
    from torch.export import Dim, export

    linear = torch.nn.Linear(2, 1)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([list(WEIGHTS)], dtype=torch.float32))
        linear.bias.copy_(torch.tensor([BIAS], dtype=torch.float32))
    program = export(linear.eval(), (torch.zeros(2, 2),), dynamic_shapes=({0: Dim("batch")},))
    torch.export.save(program, str(path))
    return path


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise ArtifactError(
            "runtime=torch builds a starter model.pt2 with PyTorch, which is not "
            "installed; install the CPU build with pip install torch==2.13.0 (or choose "
            "runtime=onnx or runtime=python)"
        ) from e
    return torch
