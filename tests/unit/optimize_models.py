"""Small ONNX models built in the tests (onnx.helper), shared by the optimize tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def write_regressor(path: Path, *, seed: int = 0, external_data: bool = False) -> None:
    """An ETA-style scalar regressor: x[N, 16] -> MatMul -> Relu -> MatMul -> eta[N, 1] (s)."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.5, (16, 64)).astype(np.float32)
    b1 = rng.normal(0, 0.1, (64,)).astype(np.float32)
    w2 = np.abs(rng.normal(0, 0.5, (64, 1))).astype(np.float32)
    b2 = np.array([300.0], dtype=np.float32)  # seconds
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "w2"], ["o0"], name="fc2"),
        helper.make_node("Mul", ["o0", "scale"], ["o1"], name="to_seconds"),
        helper.make_node("Add", ["o1", "b2"], ["eta"], name="fc2_bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "eta",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("eta", TensorProto.FLOAT, ["batch", 1])],
        [
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(b1, "b1"),
            numpy_helper.from_array(w2, "w2"),
            numpy_helper.from_array(np.array([20.0], dtype=np.float32), "scale"),
            numpy_helper.from_array(b2, "b2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    if external_data:
        onnx.save(
            model,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=path.name + ".data",
            size_threshold=0,
        )
    else:
        onnx.save(model, str(path))


def regressor_rows(count: int, seed: int, scale: float = 1.0) -> np.ndarray:
    """Inputs of the regressor; ``scale`` != 1 makes wrongly scaled calibration data."""
    return (np.random.default_rng(seed).normal(size=(count, 16)) * scale).astype(np.float32)
