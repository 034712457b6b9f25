"""servinglib optimize prune: channels removed, fine-tuned, judged and timed against the original."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servinglib.cli.main import main
from servinglib.optimize._session import open_session

torch = pytest.importorskip("torch")
pytest.importorskip("torch_pruning")

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

# A wide MLP on scikit-learn's bundled digits: 64 -> 512 -> 512 -> 10. Pruning half of each
# hidden layer leaves a quarter of the middle layer's weights, a difference far larger than
# the noise of a busy machine.
MODEL_FILE = """
import torch

class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 512), torch.nn.ReLU(),
            torch.nn.Linear(512, 512), torch.nn.ReLU(),
            torch.nn.Linear(512, 10),
        )

    def forward(self, pixels):
        return self.net(pixels / 16.0)
"""


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Any:
    """Train on one thread: on a shared 2-core machine two threads wait on each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module file, its trained weights, and train/validation .npz files (with labels)."""
    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp("prune")
    (root / "mlp.py").write_text(MODEL_FILE, encoding="utf-8")
    digits = load_digits()
    x = np.asarray(digits.data, dtype=np.float32)
    y = np.asarray(digits.target, dtype=np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    train, valid = order[:1200], order[1200:1500]
    np.savez(root / "train.npz", pixels=x[train], labels=y[train])
    np.savez(root / "train-unlabelled.npz", pixels=x[train])
    np.savez(root / "valid.npz", pixels=x[valid], labels=y[valid])
    namespace: dict[str, object] = {}
    exec(MODEL_FILE, namespace)  # the same class the CLI imports from mlp.py
    torch.manual_seed(0)
    model = namespace["MLP"]()  # type: ignore[operator]
    from servinglib.optimize._torch_train import fit

    fit(model, None, [x[train]], labels=y[train], loss="ce", epochs=4, lr=1e-3, batch_size=64)
    torch.save(model.state_dict(), root / "mlp.pt")
    return root


def _prune(root: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "optimize",
            "prune",
            f"{root / 'mlp.py'}:MLP",
            "--weights",
            str(root / "mlp.pt"),
            "--validation",
            str(root / "valid.npz"),
            "--out",
            str(out),
            "--output-names",
            "logits",
            "--repeats",
            "5",
            "--iterations",
            "40",
            "--no-progress",
            *extra,
        ]
    )


def test_pruning_halves_channels_keeps_accuracy_and_is_faster_interleaved(
    trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pruned" / "model.onnx"
    code = _prune(
        trained,
        out,
        "--train",
        str(trained / "train.npz"),
        "--ratios",
        "0.5",
        "--epochs",
        "3",
        "--max-accuracy-loss",
        "0.02",
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    report = json.loads((tmp_path / "pruned" / "prune-report.json").read_text())
    base, pruned = report["candidates"]
    assert report["metric"] == "accuracy"
    assert report["chosen_ratio"] == 0.5
    # whole neurons removed: 512 -> 256 in both hidden layers, so ~1/3 of the parameters
    assert pruned["params"] < 0.4 * base["params"]
    assert pruned["macs_reduction"] > 0.6
    assert pruned["size_mb"] < 0.4 * base["size_mb"]
    assert pruned["loss"] <= 0.02
    # timed interleaved with the unpruned model: the median round p50 is lower; a speed-up is
    # claimed only when the rounds separate, otherwise the report says why not
    assert pruned["p50_ms"] < base["p50_ms"]
    claim = pruned["p50_vs_unpruned"]
    # "p50 1.6x faster (rounds ...)", or on a busy machine "p50: no measurable difference (...)"
    assert claim.startswith("p50"), claim
    assert "faster" in claim or "no measurable difference (" in claim, claim
    assert (tmp_path / "pruned" / "prune-curve.png").stat().st_size > 1000
    # the written model is a dense ONNX graph with 384-wide layers that answers like torch
    session = open_session(out)
    valid = np.load(trained / "valid.npz")
    logits = session.raw.run(None, {"pixels": valid["pixels"]})[0]
    assert logits.shape == (300, 10)
    accuracy = float(np.mean(logits.argmax(1) == valid["labels"]))
    assert accuracy == pytest.approx(pruned["metric_value"])
    assert "wrote" in printed


def test_unmeetable_budget_refuses_and_lists_every_candidate(
    trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never" / "model.onnx"
    code = _prune(
        trained,
        out,
        "--train",
        str(trained / "train-unlabelled.npz"),  # fine-tuned with the original as teacher
        "--importance",
        "taylor",
        "--ratios",
        "0.25,0.5",
        "--epochs",
        "1",
        "--max-size-mb",
        "0.001",
    )
    err = capsys.readouterr().err
    assert code == 1
    assert not out.exists()
    assert "no candidate meets the budgets" in err
    for ratio in ("25%", "50%"):
        assert f"ratio {ratio}:" in err
    assert err.count("size ") >= 2
    assert "> 0.001 MB" in err
    report = json.loads((tmp_path / "never" / "prune-report.json").read_text())
    assert report["passed"] is False
    assert report["chosen_ratio"] is None
    assert [c["ratio"] for c in report["candidates"]] == [0.0, 0.25, 0.5]
