"""servinglib.runtimes: ONNX and TorchScript artifacts served with no user code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from servinglib.config.spec import load_config
from servinglib.errors import InvalidInputError, ModelLoadError
from servinglib.lifecycle.registry import ModelRegistry, VersionState
from servinglib.runtimes.onnx import choose_providers
from servinglib.serve.app import create_app_from_config

WEIGHTS = np.array([[1.0, -1.0], [0.5, 2.0], [0.0, 1.0]], dtype=np.float32)
BIAS = np.array([0.25, -0.5], dtype=np.float32)


def write_onnx(path: Path) -> None:
    """y = x @ W + b with a symbolic batch dimension, built with onnx.helper."""
    from onnx import TensorProto, helper, numpy_helper, save

    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["y"]),
        ],
        "affine",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        [numpy_helper.from_array(WEIGHTS, "W"), numpy_helper.from_array(BIAS, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))


def write_exported_program(path: Path) -> None:
    """The same affine map (plus a row sum) as a torch.export program with a dynamic batch."""
    import torch

    class Affine(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(3, 2)
            with torch.no_grad():
                self.linear.weight.copy_(torch.from_numpy(WEIGHTS.T.copy()))
                self.linear.bias.copy_(torch.from_numpy(BIAS))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = self.linear(x)
            return y, y.sum(dim=1)

    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(Affine(), (torch.zeros(2, 3),), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(path))


def expected(x: list[list[float]]) -> list[list[float]]:
    result: list[list[float]] = (np.asarray(x, dtype=np.float32) @ WEIGHTS + BIAS).tolist()
    return result


def make_service(tmp_path: Path, runtime: str) -> Path:
    version = tmp_path / "models" / "affine" / "1"
    version.mkdir(parents=True)
    x = [[1.0, 2.0, 3.0], [0.0, -1.0, 0.5]]
    if runtime == "onnx":
        write_onnx(version / "model.onnx")
        output: dict[str, Any] = {"y": expected(x)}
        extra = "    runtime_options: {intra_op_threads: 1, save_optimized_graph: true}\n"
    else:
        write_exported_program(version / "model.pt2")
        output = {"y": expected(x), "total": [sum(row) for row in expected(x)]}
        extra = (
            "    inputs: [{name: x, datatype: FP32, shape: [-1, 3]}]\n"
            "    outputs: [{name: y, datatype: FP32, shape: [-1, 2]}, {name: total, datatype: FP32, shape: [-1]}]\n"
        )
    (version / "test_data.json").write_text(
        json.dumps(
            {"cases": [{"input": {"x": x}, "expected": output, "tolerance": {"atol": 1e-5}}]}
        )
    )
    config = tmp_path / "servinglib.yaml"
    config.write_text(
        f"service: s\nmodels:\n  - name: affine\n    runtime: {runtime}\n    repository: models/affine\n"
        f"    default_version: '1'\n{extra}"
    )
    return config


@pytest.mark.parametrize("runtime", ["onnx", "torch"])
def test_runtime_serves_artifact_with_no_user_code(tmp_path: Path, runtime: str) -> None:
    registry = ModelRegistry(load_config(make_service(tmp_path, runtime), environ={}))
    registry.load_all()
    record = registry.record("affine", "1")
    assert record.state is VersionState.READY, record.reason
    assert record.instance is not None
    batch = [{"x": [[1.0, 0.0, 0.0]]}, {"x": [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]}]
    outputs = record.instance.predict_batch(batch)
    np.testing.assert_allclose(outputs[0]["y"], expected([[1.0, 0.0, 0.0]]), atol=1e-6)
    np.testing.assert_allclose(
        outputs[1]["y"], expected([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), atol=1e-6
    )
    assert [spec.name for spec in record.instance.inputs] == ["x"]
    assert record.instance.inputs[0].shape == (-1, 3)
    if runtime == "onnx":
        assert (tmp_path / "models" / "affine" / "1" / "model.optimized.onnx").is_file()


@pytest.mark.parametrize("runtime", ["onnx", "torch"])
def test_runtime_over_http(tmp_path: Path, runtime: str) -> None:
    client: FlaskClient = create_app_from_config(make_service(tmp_path, runtime)).test_client()
    meta = client.get("/v2/models/affine").get_json()
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}]
    assert meta["platform"] in ("onnxruntime_onnx", "pytorch_libtorch")
    response = client.post(
        "/v2/models/affine/infer",
        json={"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]},
    )
    assert response.status_code == 200, response.get_json()
    out = {o["name"]: o for o in response.get_json()["outputs"]}
    np.testing.assert_allclose(out["y"]["data"], expected([[1, 2, 3]])[0], atol=1e-5)
    wrong = client.post(
        "/v2/models/affine/infer",
        json={"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]},
    )
    assert wrong.status_code == 400
    assert "expected [-1, 3]" in wrong.get_json()["error"]
    infer = client.post("/infer", json={"model_id": "affine", "features": {"x": [[1, 2, 3]]}})
    assert infer.status_code == 200
    np.testing.assert_allclose(infer.get_json()["output"]["y"], expected([[1, 2, 3]]), atol=1e-5)
    unknown = client.post("/infer", json={"model_id": "affine", "features": {"z": [[1, 2, 3]]}})
    assert unknown.status_code == 400


def test_missing_artifact_fails_the_version(tmp_path: Path) -> None:
    config = make_service(tmp_path, "onnx")
    (tmp_path / "models" / "affine" / "1" / "model.onnx").unlink()
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    assert "model.onnx not found" in registry.record("affine", "1").reason


def test_provider_choice() -> None:
    assert choose_providers(["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert choose_providers(["CPUExecutionProvider", "CUDAExecutionProvider"]) == [
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    ]
    with pytest.raises(ModelLoadError, match="install onnxruntime-gpu"):
        choose_providers(["CPUExecutionProvider"], ["CUDAExecutionProvider"])


def test_class_and_runtime_are_exclusive(tmp_path: Path) -> None:
    from servinglib.errors import ConfigError

    config = make_service(tmp_path, "onnx")
    config.write_text(config.read_text().replace("runtime: onnx", "runtime: onnx\n    class: a:B"))
    with pytest.raises(ConfigError, match="not both"):
        load_config(config, environ={})


def write_masked_mean_onnx(path: Path) -> None:
    """pooled = sum(tokens * mask) / sum(mask) over the sequence; per_token = 2 * tokens * mask."""
    from onnx import TensorProto, helper, numpy_helper, save

    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["tokens", "mask"], ["masked"]),
            helper.make_node("ReduceSum", ["masked", "axis"], ["total"], keepdims=0),
            helper.make_node("ReduceSum", ["mask", "axis"], ["count"], keepdims=0),
            helper.make_node("Div", ["total", "count"], ["pooled"]),
            helper.make_node("Mul", ["masked", "two"], ["per_token"]),
        ],
        "masked_mean",
        [
            helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["batch", "sequence"]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "sequence"]),
        ],
        [
            helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch"]),
            helper.make_tensor_value_info("per_token", TensorProto.FLOAT, ["batch", "sequence"]),
        ],
        [
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis"),
            numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))


def _masked_mean_record(tmp_path: Path, pads: str) -> Any:
    version = tmp_path / "models" / "pool" / "1"
    version.mkdir(parents=True)
    write_masked_mean_onnx(version / "model.onnx")
    case: dict[str, Any] = {"tokens": [[1.0, 3.0]]}
    if "mask_inputs" not in pads:
        case["mask"] = [[1.0, 1.0]]
    expected_output = {"pooled": [2.0], "per_token": [[2.0, 6.0]]}
    (version / "test_data.json").write_text(
        json.dumps({"cases": [{"input": case, "expected": expected_output}]})
    )
    config = tmp_path / "servinglib.yaml"
    config.write_text(
        "service: s\nmodels:\n  - name: pool\n    runtime: onnx\n    repository: models/pool\n"
        f"    default_version: '1'\n    runtime_options: {{intra_op_threads: 1{pads}}}\n"
    )
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    return registry.record("pool", "1")


def test_sequences_of_different_lengths_are_padded_into_one_run(tmp_path: Path) -> None:
    record = _masked_mean_record(tmp_path, ", pad_inputs: {tokens: 0, mask: 0}")
    assert record.state is VersionState.READY, record.reason
    model = record.instance
    requests = [
        {"tokens": [[1.0, 2.0]], "mask": [[1.0, 1.0]]},
        {"tokens": [[4.0, 4.0, 4.0, 8.0]], "mask": [[1.0, 1.0, 1.0, 1.0]]},
        {"tokens": [[3.0, 6.0, 9.0]], "mask": [[1.0, 1.0, 1.0]]},
    ]
    runs: list[tuple[int, ...]] = []
    real_run = model._run

    def counting_run(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        runs.append(arrays["tokens"].shape)
        return real_run(arrays)

    model._run = counting_run
    outputs = model.predict_batch([model.prepare(r) for r in requests])
    assert runs == [(3, 4)], "one run for the whole batch, padded to the longest sequence"
    alone = [real_run(model.prepare(r)) for r in requests]
    for got, want in zip(outputs, alone, strict=True):
        np.testing.assert_allclose(got["pooled"], want["pooled"], rtol=1e-6)
        assert got["per_token"].shape == want["per_token"].shape  # cut back to its own length
        np.testing.assert_allclose(got["per_token"], want["per_token"], rtol=1e-6)
    assert [o["pooled"].tolist() for o in outputs] == [[1.5], [5.0], [6.0]]


def test_without_pad_inputs_different_lengths_run_one_by_one(tmp_path: Path) -> None:
    record = _masked_mean_record(tmp_path, "")
    model = record.instance
    requests = [
        {"tokens": [[1.0, 2.0]], "mask": [[1.0, 1.0]]},
        {"tokens": [[3.0, 6.0, 9.0]], "mask": [[1.0, 1.0, 1.0]]},
    ]
    outputs = model.predict_batch([model.prepare(r) for r in requests])
    assert [o["pooled"].tolist() for o in outputs] == [[1.5], [6.0]]


def test_pad_inputs_naming_an_unknown_input_fails_the_version(tmp_path: Path) -> None:
    record = _masked_mean_record(tmp_path, ", pad_inputs: {input_ids: 0}")
    assert record.state is VersionState.FAILED
    assert "pad_inputs names ['input_ids']" in record.reason


def test_prepare_batch_stacks_what_prepare_makes_of_each_request(tmp_path: Path) -> None:
    model = _masked_mean_record(tmp_path, "").instance
    requests: list[dict[str, Any]] = [
        {"tokens": [[1.0, 2.0]], "mask": [[1.0, 1.0]]},
        {"tokens": np.array([[3.0, 1e3]]), "mask": [[1, 0]]},  # arrays and ints convert too
        {"tokens": [[-2.5, 0.0]], "mask": [[0.0, 1.0]]},
    ]
    prepared = model.prepare_batch(requests)
    alone = [model.prepare(r) for r in requests]
    assert len(prepared) == len(alone)
    for got, want in zip(prepared, alone, strict=True):
        assert got.keys() == want.keys()
        for name in want:
            assert got[name].dtype == want[name].dtype
            assert got[name].shape == want[name].shape
            np.testing.assert_array_equal(got[name], want[name])
    assert model.prepare(prepared[0]) is prepared[0]  # prepared once: passed through after
    outputs = model.predict_batch(prepared)
    assert [o["pooled"].tolist() for o in outputs] == [[1.5], [3.0], [0.0]]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"tokens": [[1.0, float("nan")]], "mask": [[1.0, 1.0]]}, "NaN or Infinity"),
        ({"tokens": [[1e300, 1.0]], "mask": [[1.0, 1.0]]}, "NaN or Infinity"),  # inf as FP32
        ({"tokens": [["a", 1.0]], "mask": [[1.0, 1.0]]}, "cannot convert"),
        ({"tokens": [[1.0, 2.0]]}, "missing \\['mask'\\]"),
    ],
)
def test_prepare_batch_fails_with_the_message_of_the_bad_request_alone(
    tmp_path: Path, bad: dict[str, Any], message: str
) -> None:
    from servinglib.errors import InvalidInputError

    model = _masked_mean_record(tmp_path, "").instance
    good = {"tokens": [[1.0, 2.0]], "mask": [[1.0, 1.0]]}
    with pytest.raises(InvalidInputError, match=message):
        model.prepare(bad)
    with pytest.raises(InvalidInputError, match=message):
        model.prepare_batch([good, bad, good])


def test_prepare_batch_of_different_lengths_prepares_each_alone(tmp_path: Path) -> None:
    model = _masked_mean_record(tmp_path, "").instance
    requests = [
        {"tokens": np.array([[1.0, 2.0]]), "mask": np.array([[1.0, 1.0]])},
        {"tokens": np.array([[3.0, 6.0, 9.0]]), "mask": np.array([[1.0, 1.0, 1.0]])},
        {"tokens": [[3.0, 6.0, 9.0, 1.0]], "mask": [[1.0, 1.0, 1.0, 0.0]]},
    ]
    prepared = model.prepare_batch(requests)
    assert [p["tokens"].shape for p in prepared] == [(1, 2), (1, 3), (1, 4)]
    assert [p["mask"].shape for p in prepared] == [(1, 2), (1, 3), (1, 4)]


@pytest.mark.parametrize(
    ("bad", "dimension"),
    [
        ({"tokens": [[1.0, 2.0]], "mask": [[1.0, 1.0, 1.0]]}, "sequence"),
        ({"tokens": [[1.0, 2.0], [3.0, 4.0]], "mask": [[1.0, 1.0]]}, "batch"),
    ],
)
def test_inputs_sharing_a_named_dimension_must_agree_on_its_size(
    tmp_path: Path, bad: dict[str, Any], dimension: str
) -> None:
    """tokens and mask are both [batch, sequence]: ONNX Runtime would fail deep in the graph
    (a 500) on sizes that differ, or, once a batch pads them, answer garbage."""
    from servinglib.errors import InvalidInputError

    model = _masked_mean_record(tmp_path, ", pad_inputs: {tokens: 0, mask: 0}").instance
    message = f"share the dimension '{dimension}'"
    with pytest.raises(InvalidInputError, match=message):
        model.prepare(bad)
    good = {"tokens": [[1.0, 2.0]], "mask": [[1.0, 1.0]]}
    with pytest.raises(InvalidInputError, match=message):
        model.prepare_batch([good, bad, bad])  # the same bad shapes stack: still refused
    client = create_app_from_config(tmp_path / "servinglib.yaml").test_client()
    answer = client.post("/infer", json={"model_id": "pool", "features": bad})
    assert answer.status_code == 400, answer.get_data(as_text=True)
    assert message in answer.get_json()["error"]
    tensors = [
        {"name": name, "datatype": "FP32", "shape": list(np.shape(value)), "data": value}
        for name, value in bad.items()
    ]
    answer = client.post("/v2/models/pool/infer", json={"inputs": tensors})
    assert answer.status_code == 400, answer.get_data(as_text=True)
    assert message in answer.get_json()["error"]
    answer = client.post("/infer", json={"model_id": "pool", "features": good})
    assert answer.status_code == 200, answer.get_data(as_text=True)


def test_input_schema_array_sizes_bound_the_tensors_on_both_protocols(tmp_path: Path) -> None:
    """A graph that cannot run on empty or overlong sequences (BERT's 512 positions): the
    input_schema's minItems/maxItems refuse them on Open Inference as on /infer."""
    _masked_mean_record(tmp_path, "")
    config = tmp_path / "servinglib.yaml"
    rows = "{type: array, minItems: 1, items: {type: array, minItems: 1, maxItems: 3, items: {type: number}}}"
    config.write_text(
        config.read_text()
        + f"    input_schema:\n      type: object\n      properties: {{tokens: {rows}, mask: {rows}}}\n"
    )
    client = create_app_from_config(config).test_client()

    def v2(length: int) -> Any:
        tensors = [
            {"name": name, "datatype": "FP32", "shape": [1, length], "data": [1.0] * length}
            for name in ("tokens", "mask")
        ]
        return client.post("/v2/models/pool/infer", json={"inputs": tensors})

    assert v2(3).status_code == 200
    for length, allowed in [(4, "1 to 3"), (0, "1 to 3")]:
        answer = v2(length)
        assert answer.status_code == 400
        error = answer.get_json()["error"]
        assert f"input 'tokens' of model 'pool' has size {length} on axis 1" in error
        assert f"its input_schema allows {allowed}" in error
    features = {"tokens": [[1.0] * 4], "mask": [[1.0] * 4]}
    answer = client.post("/infer", json={"model_id": "pool", "features": features})
    assert answer.status_code == 400


MASKED = ", pad_inputs: {tokens: 0, mask: 0}, mask_inputs: {mask: tokens}"


def test_a_computed_mask_is_not_sent_and_matches_one_sent_by_hand(tmp_path: Path) -> None:
    record = _masked_mean_record(tmp_path, MASKED)
    assert record.state is VersionState.READY, record.reason
    model = record.instance
    assert [spec.name for spec in model.inputs] == ["tokens"]  # metadata, Triton config, OpenAPI
    requests = [{"tokens": [[1.0, 2.0]]}, {"tokens": [[4.0, 4.0, 4.0, 8.0]]}, {"tokens": [[3.0]]}]
    outputs = model.predict_batch([model.prepare(r) for r in requests])
    assert [o["pooled"].tolist() for o in outputs] == [[1.5], [5.0], [3.0]]
    stacked = model.prepare_batch([{"tokens": [[1.0, 2.0]]}, {"tokens": [[5.0, 7.0]]}])
    assert [p["mask"].tolist() for p in stacked] == [[[1.0, 1.0]], [[1.0, 1.0]]]
    assert [o["pooled"].tolist() for o in model.predict_batch(stacked)] == [[1.5], [6.0]]


def test_a_client_cannot_send_a_computed_mask(tmp_path: Path) -> None:
    model = _masked_mean_record(tmp_path, MASKED).instance
    with pytest.raises(InvalidInputError, match="unknown \\['mask'\\]"):
        model.prepare({"tokens": [[1.0, 2.0]], "mask": [[1.0]]})


def test_mask_inputs_naming_what_the_graph_lacks_fails_the_version(tmp_path: Path) -> None:
    record = _masked_mean_record(tmp_path, ", mask_inputs: {attention_mask: tokens}")
    assert record.state is VersionState.FAILED
    assert "mask_inputs ['attention_mask: tokens']" in record.reason
