"""Export refuses what it cannot reproduce: value-dependent branches, dicts, NumPy, bad factories.

Every refusal is a clear OptimizeError (the CLI prints it without a traceback) and leaves
``--out`` untouched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from servinglib.optimize.cli import main  # noqa: E402
from servinglib.optimize.errors import ExportVerificationError, OptimizeError  # noqa: E402
from servinglib.optimize.export import export_module, load_module  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
    # the TorchScript-based exporter is chosen on purpose (no onnxscript needed)
    pytest.mark.filterwarnings(
        "ignore:You are using the legacy TorchScript-based ONNX export:DeprecationWarning"
    ),
    pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
]


class SignBranch(torch.nn.Module):  # type: ignore[misc,name-defined]
    """Negates its logits when the input sums below zero: a branch on a value."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: Any) -> Any:
        y = self.linear(x)
        if x.sum() > 0:
            return y
        return -y


class DictOutput(torch.nn.Module):  # type: ignore[misc,name-defined]
    def forward(self, x: Any) -> Any:
        return {"y": x * 2}


class NumpyInside(torch.nn.Module):  # type: ignore[misc,name-defined]
    def forward(self, x: Any) -> Any:
        return torch.from_numpy(np.tanh(x.numpy()))


def positive_sample() -> dict[str, np.ndarray]:
    return {"x": np.abs(np.random.default_rng(0).normal(size=(2, 4))).astype(np.float32) + 0.1}


def test_a_branch_on_the_input_value_is_flagged_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "sign.onnx"
    with pytest.raises(ExportVerificationError, match="Converting a tensor to a Python boolean"):
        export_module(SignBranch(), positive_sample(), out, output_names=["logits"])
    assert not out.exists()
    # even with the warning allowed, a negated input shows the traced branch is wrong
    with pytest.raises(ExportVerificationError, match="on the negated input"):
        export_module(
            SignBranch(), positive_sample(), out, output_names=["logits"], allow_trace_warnings=True
        )
    assert list(tmp_path.iterdir()) == []


def test_an_existing_out_survives_a_failed_export(tmp_path: Path) -> None:
    out = tmp_path / "model.onnx"
    out.write_bytes(b"the previous model")
    with pytest.raises(ExportVerificationError):
        export_module(SignBranch(), positive_sample(), out, output_names=["logits"])
    assert out.read_bytes() == b"the previous model"
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


@pytest.mark.parametrize(
    ("module", "message"),
    [
        (DictOutput(), r"returns a dict \(\['y'\]\).*tuple of tensors"),
        (NumpyInside(), r"(?s)NumpyInside.*Converting a tensor to a NumPy array"),
    ],
)
def test_modules_that_cannot_be_exported_get_a_clear_error(
    tmp_path: Path, module: Any, message: str
) -> None:
    out = tmp_path / "m.onnx"
    with pytest.raises(OptimizeError, match=message):
        export_module(module, positive_sample(), out, output_names=["y"])
    assert not out.exists()


def test_cli_errors_have_no_traceback_and_no_temporary_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    factory = tmp_path / "factories.py"
    factory.write_text(
        "def broken():\n    raise RuntimeError('weights missing')\n\n"
        "import torch\n\n"
        "class Dict(torch.nn.Module):\n"
        "    def forward(self, x):\n        return {'y': x}\n",
        encoding="utf-8",
    )
    sample = tmp_path / "sample.npz"
    np.savez(sample, **positive_sample())
    out = tmp_path / "out" / "model.onnx"
    for target, expected in (
        ("broken", "factory 'factories.py:broken' raised RuntimeError: weights missing"),
        ("Dict", "returns a dict"),
    ):
        code = main(["export", f"{factory}:{target}", "--sample", str(sample), "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2
        assert expected in err
        assert "Traceback" not in err
        assert "/tmp/" not in err.replace(str(tmp_path), "")
        assert not out.exists()


def test_a_factory_that_raises_names_the_factory(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("def make():\n    raise ValueError('no')\n")
    with pytest.raises(OptimizeError, match=r"factory 'bad.py:make' raised ValueError: no"):
        load_module("bad.py:make", root=tmp_path)
