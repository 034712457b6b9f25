"""The Triton model configuration and batch-dimension handling of Open Inference requests."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from servinglib.compose.spec import EnsembleVersion, parse_composition
from servinglib.compose.triton import combiner_config, ensemble_scheduling
from servinglib.config.spec import BatchPolicy
from servinglib.describe.triton_config import tensor_metadata, triton_model_config
from servinglib.errors import InvalidInputError
from servinglib.model import TensorSpec
from servinglib.wire.batch_rows import split_rows, splits_rows, stack_rows
from tests.triton_rules import loader_problems

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
    # one label per row: Triton's loader refuses empty dims, so [1] reshaped to a scalar
    assert config["output"] == [
        {"name": "label", "data_type": "TYPE_INT64", "dims": [1], "reshape": {"shape": []}}
    ]
    assert loader_problems(config) == []
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


def test_a_scalar_of_a_model_that_does_not_batch_has_dims_one() -> None:
    scalar = (TensorSpec("score", "FP64", ()),)
    config = triton_model_config("s", OnnxLike(), ONNX_IN, scalar, None, ["1"], "1")
    assert config["output"] == [{"name": "score", "data_type": "TYPE_FP64", "dims": [1]}]
    assert loader_problems(config) == []


class Composed:
    """What the config reads of a composed model: its Triton ensemble scheduling."""

    def __init__(self, entry: dict[str, Any], inputs: Any, outputs: Any) -> None:
        composition = parse_composition(entry)
        assert composition is not None
        self.spec = composition.versions["1"]
        self.inputs, self.outputs = inputs, outputs

    def ensemble_scheduling(self) -> dict[str, Any]:
        return ensemble_scheduling("c", "1", self.spec, self.inputs, self.outputs)


MEASUREMENTS = (TensorSpec("measurements", "FP64", (30,)),)
CANCER_OUT = (TensorSpec("probability_malignant", "FP64", (1,)), TensorSpec("label", "BYTES", (1,)))
TICKET_IN = (TensorSpec("text", "BYTES", (1,)),)
TICKET_OUT = (TensorSpec("label", "BYTES", (1,)), TensorSpec("confidence", "FP32", (1,)))
ENSEMBLE = {
    "ensemble": {
        "1": {
            "members": [
                {"model": "breast-cancer", "version": "1"},
                {"model": "breast-cancer", "version": "2"},
            ],
            "combiner": "custom",
            "function": "models.breast_cancer.ensemble:mean_probability",
        }
    }
}
TICKETS = {
    "pipeline": {
        "1": {
            "steps": [
                {"name": "tokenize", "model": "tokenize", "inputs": {"text": "request.text"}},
                {"name": "embed", "model": "embed", "inputs": {"input_ids": "tokenize.input_ids"}},
                {"name": "classify", "model": "classify", "inputs": {"embedding": "embed"}},
            ],
            "outputs": {"label": "classify.label", "confidence": "classify.confidence"},
        }
    }
}
WHOLE = {  # steps fed the whole request, the answer the last step's whole answer
    "pipeline": {"1": {"steps": [{"model": "prep"}, {"model": "head", "inputs": {"y": "prep.y"}}]}}
}


@pytest.mark.parametrize(
    ("entry", "inputs", "outputs"),
    [
        (ENSEMBLE, MEASUREMENTS, CANCER_OUT),
        (TICKETS, TICKET_IN, TICKET_OUT),
        (WHOLE, ONNX_IN, ONNX_OUT),
    ],
    ids=["ensemble", "pipeline", "whole-answers"],
)
def test_composed_models_are_ensembles_triton_loads(
    entry: dict[str, Any], inputs: Any, outputs: Any
) -> None:
    policy = BatchPolicy(max_batch_size=8)
    config = triton_model_config(
        "c", Composed(entry, inputs, outputs), inputs, outputs, policy, ["1"], "1"
    )
    assert loader_problems(config) == []
    assert config["platform"] == "ensemble"
    assert "instance_group" not in config
    assert "dynamic_batching" not in config
    model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")
    json_format = pytest.importorskip("google.protobuf.json_format")
    json_format.ParseDict(config, model_config_pb2.ModelConfig())  # every field is Triton's


def test_the_ensemble_members_feed_a_combiner_step() -> None:
    composed = Composed(ENSEMBLE, MEASUREMENTS, CANCER_OUT)
    steps = composed.ensemble_scheduling()["step"]
    assert steps[0] == {
        "model_name": "breast-cancer",
        "model_version": 1,
        "input_map": {"measurements": "measurements"},
        "output_map": {
            "probability_malignant": "breast-cancer:1.probability_malignant",
            "label": "breast-cancer:1.label",
        },
    }
    assert (steps[-1]["model_name"], steps[-1]["model_version"]) == ("c_combiner", 1)
    assert sorted(steps[-1]["input_map"]) == [
        "breast-cancer:1.label",
        "breast-cancer:1.probability_malignant",
        "breast-cancer:2.label",
        "breast-cancer:2.probability_malignant",
    ]
    assert steps[-1]["output_map"] == {
        "probability_malignant": "probability_malignant",
        "label": "label",
    }
    # the step's model has a configuration too (perf_analyzer reads every step's), whose
    # inputs are what the members write and whose outputs are the ensemble's
    assert isinstance(composed.spec, EnsembleVersion)
    config = combiner_config("c", "1", composed.spec, CANCER_OUT)
    assert config["name"] == "c_combiner"
    assert [t["name"] for t in config["input"]] == list(steps[-1]["input_map"])
    assert [t["name"] for t in config["output"]] == ["probability_malignant", "label"]
    assert config["parameters"]["servinglib_combiner"] == {
        "string_value": "models.breast_cancer.ensemble:mean_probability"
    }
    assert loader_problems(config) == []


def test_the_rules_catch_what_triton_refuses() -> None:
    """The checker itself: the configurations the issue saw Triton refuse."""
    empty_dims = {
        "name": "d",
        "max_batch_size": 32,
        "output": [{"name": "digit", "data_type": "TYPE_INT64", "dims": []}],
    }
    assert loader_problems(empty_dims) == ["output 'digit' of 'd': must specify 'dims'"]
    no_maps = {
        "name": "e",
        "platform": "ensemble",
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [1]}],
        "ensemble_scheduling": {
            "step": [{"model_name": "m", "model_version": -1, "input_map": {}, "output_map": {}}]
        },
    }
    assert loader_problems(no_maps) == [
        "must specify 'input_map' in step 0 of ensemble 'e'",
        "must specify 'output_map' in step 0 of ensemble 'e'",
    ]
    unwritten = {
        **no_maps,
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [1]}],
        "instance_group": [{"count": 1}],
        "ensemble_scheduling": {
            "step": [{"model_name": "m", "input_map": {"x": "x"}, "output_map": {"z": "m.z"}}]
        },
    }
    assert loader_problems(unwritten) == [
        "instance group should not be specified for ensemble 'e'",
        "ensemble output 'y' for ensemble 'e' is not used",
        "ensemble tensor 'm.z' is unused in ensemble 'e'",
    ]
