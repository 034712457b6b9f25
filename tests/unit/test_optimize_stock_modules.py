"""Stock PyTorch modules export with dynamic batch and sequence, and INT8 that is not is named.

nn.LSTM, nn.GRU and nn.TransformerEncoder raise TracerWarnings inside PyTorch itself (listed,
not failing); TransformerEncoder's fused fast path is off while exporting. A quantized model
that is mostly float (a GRU, an LSTM under static QDQ) is reported as essentially FP32.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from servinglib.optimize.cli import main  # noqa: E402
from servinglib.optimize.errors import ExportVerificationError  # noqa: E402
from servinglib.optimize.export import export_module  # noqa: E402

# The TorchScript-based exporter is chosen on purpose (torch flags it); PyTorch's own
# advisories about exporting recurrent layers and nested tensors are not under test.
pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:You are using the legacy TorchScript-based ONNX export:DeprecationWarning"
    ),
    pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Exporting a model to ONNX with a batch_size:UserWarning"),
    pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning"),
]
QUICK_FLAGS = (
    "--warmup", "1", "--iterations", "5", "--repeats", "2", "--batch-size", "4",
    "--min-round-s", "0", "--no-progress",
)  # fmt: skip
SEQUENCE = {"x": {1: "sequence"}}


class Recurrent(torch.nn.Module):  # type: ignore[misc]
    """A sequence classifier: LSTM or GRU over x[N, S, 8], logits of the last step."""

    def __init__(self, cell: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.rnn = getattr(torch.nn, cell)(8, 16, batch_first=True)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x: Any) -> Any:
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class Encoder(torch.nn.Module):  # type: ignore[misc]
    """nn.TransformerEncoder with a padding mask (its nested-tensor fast path under no_grad)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)
        self.encoder = torch.nn.TransformerEncoder(layer, 1)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: Any, mask: Any) -> Any:
        hidden = self.encoder(x, src_key_padding_mask=mask < 0.5)
        return self.head(hidden.mean(dim=1))


def sequences(count: int, length: int, width: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(count, length, width)).astype(np.float32)


def report(directory: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((directory / "optimize-report.json").read_text())
    return loaded


@pytest.mark.parametrize(
    ("cell", "flags", "float_op"),
    [
        ("LSTM", ("--method", "static", "--require-batch-invariance"), "LSTM"),
        ("GRU", ("--method", "dynamic"), "GRU"),
    ],
)
def test_recurrent_modules_export_and_their_float_weights_are_reported(
    cell: str,
    flags: tuple[str, ...],
    float_op: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = tmp_path / f"{cell}.onnx"
    result = export_module(
        Recurrent(cell),
        {"x": sequences(2, 5, 8, 0)},
        model,
        output_names=["logits"],
        dynamic_axes=SEQUENCE,
    )
    assert result.trace_warnings == ()
    assert any(w.startswith("rnn.py:") for w in result.ignored_warnings)
    assert "sequence-1: x[2, 4, 8]" in result.checked_shapes
    np.savez(tmp_path / "valid.npz", x=sequences(12, 5, 8, 1))
    code = main(
        ["run", str(model), "--validation", str(tmp_path / "valid.npz"), *flags,
         "--out", str(tmp_path / "o" / "m.onnx"), *QUICK_FLAGS]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code in (0, 1), captured.err
    document = report(tmp_path / "o")
    quantization = document["quantization"]
    assert quantization is not None, captured.err
    assert quantization["essentially_fp32"] is True
    assert quantization["weights_int8_share"] < 0.5
    assert float_op in quantization["float_op_types"]
    assert any("essentially FP32" in w and float_op in w for w in document["warnings"])
    assert f"left float: {float_op}" in captured.out


def test_transformer_encoder_exports_with_dynamic_batch_and_sequence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mask = np.ones((2, 6), np.float32)
    mask[1, 4:] = 0.0
    model = tmp_path / "encoder.onnx"
    result = export_module(
        Encoder(),
        {"x": sequences(2, 6, 16, 0), "mask": mask},
        model,
        output_names=["logits"],
        dynamic_axes={"x": {1: "sequence"}, "mask": {1: "sequence"}},
    )
    assert result.trace_warnings == ()
    assert result.max_abs_error < 1e-4
    assert "batch+1: x[3, 6, 16], mask[3, 6]" in result.checked_shapes
    assert "sequence-1: x[2, 5, 16], mask[2, 5]" in result.checked_shapes
    # fast paths are back on afterwards
    assert torch.backends.mha.get_fastpath_enabled()
    lines = []
    for i, length in enumerate((3, 5, 7, 4, 6, 8, 5, 3)):
        x = sequences(1, length, 16, 10 + i)[0]
        lines.append(json.dumps({"x": x.tolist(), "mask": [1.0] * length}))
    (tmp_path / "valid.jsonl").write_text("\n".join(lines) + "\n")
    code = main(
        ["run", str(model), "--validation", str(tmp_path / "valid.jsonl"),
         "--method", "dynamic-per-token", "--out", str(tmp_path / "o" / "m.onnx"), *QUICK_FLAGS]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert report(tmp_path / "o")["quantization"]["essentially_fp32"] is False


class ValueBranch(torch.nn.Module):  # type: ignore[misc]
    """The user's own value-dependent branch: a trace fixes it."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.GRU(8, 8, batch_first=True)

    def forward(self, x: Any) -> Any:
        out, _ = self.rnn(x)
        if out.sum().item() > 100:
            return out[:, -1] * 2
        return out[:, -1]


def test_the_users_own_trace_warnings_still_fail(tmp_path: Path) -> None:
    with pytest.raises(ExportVerificationError, match=r"test_optimize_stock_modules.py:\d+"):
        export_module(
            ValueBranch(),
            {"x": sequences(2, 5, 8, 0)},
            tmp_path / "out" / "m.onnx",
            output_names=["y"],
            dynamic_axes=SEQUENCE,
        )
    assert not (tmp_path / "out").exists()  # no empty directory left behind


def test_a_variant_that_cannot_run_is_an_error_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "fixed_batch.py").write_text(
        "import torch\n"
        "class FixedBatch(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x.view(2, 40).sum(dim=1, keepdim=True)\n"
    )
    np.savez(tmp_path / "sample.npz", x=sequences(2, 5, 8, 0))
    code = main(
        ["export", f"{tmp_path / 'fixed_batch.py'}:FixedBatch", "--sample",
         str(tmp_path / "sample.npz"), "--out", str(tmp_path / "new" / "dir" / "m.onnx")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: m.onnx: ")
    assert "batch+1" in err
    assert "Traceback" not in err
    assert not (tmp_path / "new").exists()
