"""The composition service copied into a directory, with its ONNX member built.

``services/composition`` holds small members (a scaler, a decision head, constants, a flaky
one), a 3-step pipeline whose middle step is a batched ONNX MatMul, and ensembles. The
composition benchmark measures it, and the test suite uses it as its composition fixture.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SERVICE = Path(__file__).parent / "services" / "composition"

# y = x @ W: the second column wins for increasing inputs ([1, 2, 3, 4] -> [4, 6]).
WEIGHTS = np.array([[1, 0], [0, 1], [1, 0], [0, 1]], dtype=np.float32)


def linear_onnx(path: Path) -> None:
    """Write the [-1, 4] -> [-1, 2] MatMul model of ``linear`` to ``path``."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])],
        [numpy_helper.from_array(WEIGHTS, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def composition_service(directory: Path) -> Path:
    """Copy the service into ``directory``; returns its servinglib.yaml."""
    shutil.copytree(SERVICE, directory, dirs_exist_ok=True)
    linear_onnx(directory / "models" / "linear" / "1" / "model.onnx")
    return directory / "servinglib.yaml"
