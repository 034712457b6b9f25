"""The Triton model configuration and batch-dimension handling of Open Inference requests."""

from __future__ import annotations

import numpy as np
import pytest

from servinglib.config.spec import BatchPolicy
from servinglib.describe.triton_config import tensor_metadata, triton_model_config
from servinglib.errors import InvalidInputError
from servinglib.model import TensorSpec
from servinglib.wire.batch_rows import split_rows, splits_rows, stack_rows

ONNX_IN = (TensorSpec("pixels", "FP32", (-1, 64)),)
ONNX_OUT = (TensorSpec("label", "INT64", (-1,)),)
TEXT_IN = (TensorSpec("text", "BYTES", (1,)),)
TEXT_OUT = (TensorSpec("embedding", "FP32", (384,)),)


class OnnxLike:
    platform = "onnxruntime_onnx"


class TorchLike:
    platform = "pytorch_libtorch"


def test_batched_runtime_model_drops_the_batch_dimension() -> None:
    policy = BatchPolicy(max_batch_size=32, max_queue_delay_us=500, preferred_batch_sizes=(8,))
    config = triton_model_config("digits", OnnxLike(), ONNX_IN, ONNX_OUT, policy, ["1", "2"], "2")
    assert (config["platform"], config["backend"]) == ("onnxruntime_onnx", "onnxruntime")
    assert config["max_batch_size"] == 32
    assert config["input"] == [{"name": "pixels", "data_type": "TYPE_FP32", "dims": [64]}]
    assert config["output"] == [{"name": "label", "data_type": "TYPE_INT64", "dims": []}]
    assert config["dynamic_batching"] == {
        "preferred_batch_size": [8],
        "max_queue_delay_microseconds": 500,
        "preserve_ordering": False,
        "default_queue_policy": {"max_queue_size": 256},
    }
    assert config["version_policy"] == {"specific": {"versions": [1, 2]}}


def test_an_input_schema_that_bounds_the_rows_bounds_max_batch_size() -> None:
    """One text per request (the outermost array holds one row): perf_analyzer must not send 4."""
    policy = BatchPolicy(max_batch_size=32)
    ids = (TensorSpec("input_ids", "INT64", (-1, -1)),)
    one_row = {
        "properties": {
            "input_ids": {"type": "array", "maxItems": 1, "items": {"type": "array", "items": {}}}
        }
    }
    config = triton_model_config("embed", OnnxLike(), ids, ONNX_OUT, policy, ["1"], "1", one_row)
    assert config["max_batch_size"] == 1
    assert config["input"][0]["dims"] == [-1]
    loose = {"properties": {"input_ids": {"type": "array", "items": {"type": "array"}}}}
    config = triton_model_config("embed", OnnxLike(), ids, ONNX_OUT, policy, ["1"], "1", loose)
    assert config["max_batch_size"] == 32


def test_unbatched_model_keeps_full_shapes_and_no_batching_block() -> None:
    config = triton_model_config("m", TorchLike(), ONNX_IN, ONNX_OUT, None, ["a"], "a")
    assert (config["platform"], config["backend"]) == ("pytorch_libtorch", "pytorch")
    assert config["max_batch_size"] == 0
    assert "dynamic_batching" not in config
    assert config["input"][0]["dims"] == [-1, 64]
    assert config["version_policy"] == {"all": {}}


def test_batched_python_model_keeps_item_shapes() -> None:
    policy = BatchPolicy(max_batch_size=16)
    config = triton_model_config("minilm", object(), TEXT_IN, TEXT_OUT, policy, ["2"], "2")
    assert (config["platform"], config["backend"]) == ("", "python")
    assert config["max_batch_size"] == 16
    assert config["input"] == [{"name": "text", "data_type": "TYPE_STRING", "dims": [1]}]
    assert config["output"][0]["dims"] == [384]
    assert splits_rows(TEXT_IN, policy)
    assert not splits_rows(ONNX_IN, policy)
    assert not splits_rows(TEXT_IN, None)


def test_split_and_stack_rows() -> None:
    texts = np.array([[b"a"], [b"b"], [b"c"]], dtype=object)
    rows = split_rows({"text": texts}, TEXT_IN, max_batch_size=4)
    assert rows is not None
    assert [row["text"].tolist() for row in rows] == [[b"a"], [b"b"], [b"c"]]
    assert split_rows({"text": np.array([b"a"], dtype=object)}, TEXT_IN, 4) is None
    stacked = stack_rows([{"e": [1.0, 2.0]}, {"e": [3.0, 4.0]}])
    np.testing.assert_array_equal(stacked["e"], [[1.0, 2.0], [3.0, 4.0]])


def test_split_rows_refuses_inconsistent_batches() -> None:
    specs = (TensorSpec("a", "FP32", (2,)), TensorSpec("b", "FP32", (2,)))
    with pytest.raises(InvalidInputError, match="takes 1 to 2"):
        split_rows({"a": np.zeros((3, 2))}, specs[:1], max_batch_size=2)
    with pytest.raises(InvalidInputError, match="batch dimensions differ"):
        split_rows({"a": np.zeros((3, 2)), "b": np.zeros((2, 2))}, specs, 8)
    with pytest.raises(InvalidInputError, match="to every input or to none"):
        split_rows({"a": np.zeros((3, 2)), "b": np.zeros(2)}, specs, 8)
    with pytest.raises(TypeError, match="same tensor names"):
        stack_rows([{"e": 1}, {"f": 2}])


def test_metadata_of_a_row_splitting_model_shows_the_batch_dimension() -> None:
    assert tensor_metadata(TEXT_IN[0], rows=True)["shape"] == [-1, 1]
    assert tensor_metadata(TEXT_IN[0], rows=False)["shape"] == [1]
    assert tensor_metadata(ONNX_IN[0], rows=False) == {
        "name": "pixels",
        "datatype": "FP32",
        "shape": [-1, 64],
    }
