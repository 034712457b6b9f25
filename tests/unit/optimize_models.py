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


def write_two_head(path: Path, *, seed: int = 0) -> None:
    """A model returning ``(class_logits[N, 3], amount[N, 1])`` from one hidden layer.

    ``amount`` is a large value (hundreds) read off the same features: INT8 errors that
    leave the class decision alone move it by whole units.
    """
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.5, (8, 32)).astype(np.float32)
    wc = rng.normal(0, 0.5, (32, 3)).astype(np.float32)
    wa = rng.normal(0, 0.5, (32, 1)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="hidden"),
        helper.make_node("Relu", ["h0"], ["h"], name="relu"),
        helper.make_node("MatMul", ["h", "wc"], ["class_logits"], name="classes"),
        helper.make_node("MatMul", ["h", "wa"], ["a0"], name="amount_head"),
        helper.make_node("Mul", ["a0", "scale"], ["a1"], name="amount_scale"),
        helper.make_node("Add", ["a1", "offset"], ["amount"], name="amount_offset"),
    ]
    graph = helper.make_graph(
        nodes,
        "two_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [
            helper.make_tensor_value_info("class_logits", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("amount", TensorProto.FLOAT, ["batch", 1]),
        ],
        [
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(wc, "wc"),
            numpy_helper.from_array(wa, "wa"),
            numpy_helper.from_array(np.array([40.0], dtype=np.float32), "scale"),
            numpy_helper.from_array(np.array([500.0], dtype=np.float32), "offset"),
        ],
    )
    _save(graph, path)


def write_sigmoid(path: Path, *, seed: int = 0) -> None:
    """A one-value sigmoid output ``p[N, 1]`` (a binary classifier's probability)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.5, (8, 1)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["z"], name="score"),
            helper.make_node("Sigmoid", ["z"], ["p"], name="sigmoid"),
        ],
        "sigmoid",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, ["batch", 1])],
        [numpy_helper.from_array(w, "w")],
    )
    _save(graph, path)


def write_gemm_mlp(path: Path, *, seed: int = 0) -> None:
    """``nn.Linear`` as exported on 2-D input: Gemm (transB=1) fc1 -> Relu -> Gemm fc2."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.4, (32, 8)).astype(np.float32)  # [out, in], as nn.Linear stores it
    w2 = rng.normal(0, 0.4, (4, 32)).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h0"], name="fc1", transB=1),
        helper.make_node("Relu", ["h0"], ["h"], name="relu"),
        helper.make_node("Gemm", ["h", "w2", "b2"], ["logits"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "gemm_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4])],
        [
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(np.zeros(32, np.float32), "b1"),
            numpy_helper.from_array(w2, "w2"),
            numpy_helper.from_array(np.zeros(4, np.float32), "b2"),
        ],
    )
    _save(graph, path)


def write_recommender(path: Path, *, seed: int = 0) -> None:
    """``ids[N, 4]`` (int64) -> embedding Gather -> mean -> MatMul -> ``score[N, 2]``.

    One row of the table is 1000x larger than the others: one INT8 scale for the whole
    table (what the quantizer gives a Gather) then rounds every other row to almost zero.
    """
    rng = np.random.default_rng(seed)
    table = rng.normal(0, 1.0, (20, 16)).astype(np.float32)
    table[19] *= 1000.0  # an id never seen in the samples, with huge weights
    w = rng.normal(0, 0.5, (16, 2)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
        helper.make_node("ReduceMean", ["e"], ["m"], name="pool", axes=[1], keepdims=0),
        helper.make_node("MatMul", ["m", "w"], ["score"], name="head"),
    ]
    graph = helper.make_graph(
        nodes,
        "recommender",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 4])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 2])],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(w, "w")],
    )
    _save(graph, path)


def _save(graph: onnx.GraphProto, path: Path) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
