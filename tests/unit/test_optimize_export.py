"""servinglib.optimize.export: PyTorch → ONNX round trips, verification, loading modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servinglib.cli.main import main
from servinglib.optimize._session import open_session
from servinglib.optimize.errors import ExportVerificationError, OptimizeError
from servinglib.optimize.export import export_module, load_module

torch = pytest.importorskip("torch")

# The TorchScript-based exporter is chosen on purpose (no onnxscript needed); torch flags it.
LEGACY_EXPORTER = [
    pytest.mark.filterwarnings(
        "ignore:You are using the legacy TorchScript-based ONNX export:DeprecationWarning"
    ),
    pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
]
pytestmark = LEGACY_EXPORTER


class Classifier(torch.nn.Module):
    """Two linear layers; the exported graph must agree with it at any batch size."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)
        )

    def forward(self, x: Any) -> Any:
        return self.net(x)


class MeanPooledEmbedding(torch.nn.Module):
    """Token embeddings averaged over the attention mask: batch and sequence axes vary."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embedding = torch.nn.Embedding(50, 8)
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, input_ids: Any, attention_mask: Any) -> Any:
        tokens = self.proj(self.embedding(input_ids))
        mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
        return (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


class ShapeBranch(torch.nn.Module):
    """Python control flow on the batch size: tracing records one branch only."""

    def forward(self, x: Any) -> Any:
        if x.shape[0] == 2:
            return x * 2.0
        return x


def torch_out(module: Any, *arrays: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        result: np.ndarray = module(*(torch.from_numpy(a) for a in arrays)).numpy()
    return result


def test_round_trip_agrees_with_pytorch_at_other_batch_sizes(tmp_path: Path) -> None:
    module = Classifier().eval()
    sample = np.random.default_rng(0).normal(size=(2, 6)).astype(np.float32)
    path = tmp_path / "classifier.onnx"
    result = export_module(module, {"x": sample}, path, output_names=["logits"])
    assert result.opset == 17
    assert result.input_names == ("x",)
    assert result.output_names == ("logits",)
    assert result.dynamic_axes == {"x": {0: "batch"}, "logits": {0: "batch"}}
    assert result.max_abs_error < 1e-5
    assert [s.split(":")[0] for s in result.checked_shapes] == [
        "sample",
        "batch+1",
        "negated",
        "x10",
        "x0.1",
        "random",
    ]
    assert result.trace_warnings == ()
    session = open_session(path)
    assert [i.name for i in session.raw.get_inputs()] == ["x"]
    x = np.random.default_rng(1).normal(size=(7, 6)).astype(np.float32)
    np.testing.assert_allclose(session.run({"x": x})[0], torch_out(module, x), atol=1e-5)


def test_sequence_axis_is_dynamic_and_verified(tmp_path: Path) -> None:
    module = MeanPooledEmbedding().eval()
    ids = np.array([[3, 4, 5, 6], [7, 8, 0, 0]], dtype=np.int64)
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=np.int64)
    path = tmp_path / "pool.onnx"
    result = export_module(
        module,
        {"input_ids": ids, "attention_mask": mask},
        path,
        output_names=["embedding"],
        dynamic_axes={"input_ids": {1: "sequence"}, "attention_mask": {1: "sequence"}},
        opset=18,
    )
    assert "sequence-1: input_ids[2, 3], attention_mask[2, 3]" in result.checked_shapes
    session = open_session(path)
    long_ids = np.arange(1, 31, dtype=np.int64).reshape(3, 10)
    long_mask = np.ones_like(long_ids)
    np.testing.assert_allclose(
        session.run({"input_ids": long_ids, "attention_mask": long_mask})[0],
        torch_out(module, long_ids, long_mask),
        atol=1e-5,
    )


@pytest.mark.filterwarnings(
    "ignore:Converting a tensor to a Python boolean:torch.jit.TracerWarning"
)
def test_a_trace_that_does_not_generalise_is_refused(tmp_path: Path) -> None:
    sample = {"x": np.ones((2, 3), dtype=np.float32)}
    out = tmp_path / "branch.onnx"
    with pytest.raises(ExportVerificationError, match=r"test_optimize_export.py:\d+: Converting"):
        export_module(ShapeBranch(), sample, out, output_names=["y"])
    assert not out.exists()
    # allowed warnings still meet the numerical check on a batch one larger
    with pytest.raises(ExportVerificationError, match=r"on the batch\+1 input .*control flow"):
        export_module(ShapeBranch(), sample, out, output_names=["y"], allow_trace_warnings=True)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_bad_requests_are_refused(tmp_path: Path) -> None:
    sample = {"x": np.ones((2, 6), dtype=np.float32)}
    with pytest.raises(OptimizeError, match="opset 13 is too old"):
        export_module(Classifier(), sample, tmp_path / "m.onnx", output_names=["y"], opset=13)
    with pytest.raises(OptimizeError, match=r"dynamic axes name \['ids'\]"):
        export_module(
            Classifier(),
            sample,
            tmp_path / "m.onnx",
            output_names=["y"],
            dynamic_axes={"ids": {1: "sequence"}},
        )


def write_factory(directory: Path) -> Path:
    source = directory / "factory.py"
    source.write_text(
        "import torch\n\n"
        "def build():\n"
        "    return torch.nn.Sequential(torch.nn.Linear(4, 2))\n\n"
        "NOT_A_MODULE = 3\n"
    )
    return source


@pytest.mark.filterwarnings(r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning")
def test_load_module_from_a_file_factory_weights_and_torchscript(tmp_path: Path) -> None:
    write_factory(tmp_path)
    weights = tmp_path / "weights.pt"
    reference = torch.nn.Sequential(torch.nn.Linear(4, 2))
    torch.save(reference.state_dict(), weights)
    module = load_module("factory.py:build", weights=weights, root=tmp_path)
    x = np.ones((1, 4), dtype=np.float32)
    np.testing.assert_allclose(torch_out(module, x), torch_out(reference, x))
    assert not module.training
    scripted = tmp_path / "model.pt"
    torch.jit.save(torch.jit.trace(reference, torch.from_numpy(x)), str(scripted))
    np.testing.assert_allclose(
        torch_out(load_module("model.pt", root=tmp_path), x), torch_out(reference, x)
    )
    with pytest.raises(OptimizeError, match="not callable"):
        load_module("factory.py:NOT_A_MODULE", root=tmp_path)
    with pytest.raises(OptimizeError, match="has no attribute 'missing'"):
        load_module("factory.py:missing", root=tmp_path)


def test_cli_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_factory(tmp_path)
    sample = tmp_path / "sample.npz"
    np.savez(sample, features=np.ones((2, 4), dtype=np.float32))
    out = tmp_path / "model.onnx"
    code = main(
        [
            "optimize",
            "export",
            str(tmp_path / "factory.py") + ":build",
            "--sample",
            str(sample),
            "--output-names",
            "scores",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert "verified against PyTorch" in capsys.readouterr().out
    assert [o.name for o in open_session(out).raw.get_outputs()] == ["scores"]
    assert main(["optimize", "export", "x.py:y", "--sample", str(sample), "--out", "o"]) == 2
    assert "x.py" in capsys.readouterr().err
