"""servinglib optimize distill: a student learns the teacher's outputs on unlabelled data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servinglib.cli.main import main
from servinglib.optimize._session import open_session
from servinglib.optimize.errors import OptimizeError

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning")]

# The teacher: digits -> 4 hidden blocks in a ModuleList -> 10 logits; the student given by
# the user is a plain small MLP.
MODELS = """
import torch

class Teacher(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(64, 96)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(96, 96), torch.nn.ReLU()) for _ in range(4)
        )
        self.out = torch.nn.Linear(96, 10)

    def forward(self, pixels):
        h = torch.relu(self.inp(pixels / 16.0))
        for block in self.blocks:
            h = h + block(h)
        return self.out(h)

class Student(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 24), torch.nn.ReLU(), torch.nn.Linear(24, 10)
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
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Teacher weights, unlabelled train/validation .npz, a held-out test split."""
    from sklearn.datasets import load_digits

    from servinglib.optimize._torch_train import fit

    root = tmp_path_factory.mktemp("distill")
    (root / "models.py").write_text(MODELS, encoding="utf-8")
    namespace: dict[str, Any] = {}
    exec(MODELS, namespace)
    digits = load_digits()
    x = np.asarray(digits.data, dtype=np.float32)
    y = np.asarray(digits.target, dtype=np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    train, valid, test = order[:1000], order[1000:1300], order[1300:]
    torch.manual_seed(0)
    teacher = namespace["Teacher"]()
    fit(teacher, None, [x[train]], labels=y[train], loss="ce", epochs=4, lr=2e-3, batch_size=64)
    torch.save(teacher.state_dict(), root / "teacher.pt")
    np.savez(root / "train.npz", pixels=x[train])  # no labels: the teacher is the target
    np.savez(root / "valid.npz", pixels=x[valid])
    return root, {"namespace": namespace, "teacher": teacher, "test": x[test]}


def _agreement(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(a.argmax(-1) == b.argmax(-1)))


def test_user_student_gap_to_teacher_shrinks_on_held_out_data(
    setup: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, ctx = setup
    out = tmp_path / "student" / "model.onnx"
    code = main(
        [
            "optimize",
            "distill",
            f"{root / 'models.py'}:Teacher",
            "--weights",
            str(root / "teacher.pt"),
            "--student",
            f"{root / 'models.py'}:Student",
            "--train",
            str(root / "train.npz"),
            "--validation",
            str(root / "valid.npz"),
            "--loss",
            "kl",
            "--epochs",
            "8",
            "--lr",
            "5e-3",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    assert "untrained" in capsys.readouterr().out
    report = json.loads((tmp_path / "student" / "distill-report.json").read_text())
    assert report["student_params"] < report["teacher_params"] / 5
    assert report["best"] > report["untrained_student"] + 0.5
    # on the test split, never seen: the exported student vs the untrained one
    test = ctx["test"]
    with torch.no_grad():
        teacher_logits = ctx["teacher"](torch.from_numpy(test)).numpy()
        untrained = ctx["namespace"]["Student"]()(torch.from_numpy(test)).numpy()
    student = open_session(out).raw.run(None, {"pixels": test})[0]
    before, after = _agreement(untrained, teacher_logits), _agreement(student, teacher_logits)
    assert after > 0.85, (before, after)
    assert after - before > 0.5, (before, after)


def test_derived_student_checkpoints_and_resumes(
    setup: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    from servinglib.optimize.distill import DistillSettings, derive_student, distill

    _, ctx = setup
    teacher = ctx["teacher"]
    train = {"pixels": np.load(setup[0] / "train.npz")["pixels"]}
    valid = {"pixels": np.load(setup[0] / "valid.npz")["pixels"]}
    student = derive_student(teacher, keep_layers=2)
    assert len(student.blocks) == 2
    assert len(teacher.blocks) == 4
    # initialised from the teacher: the kept blocks are the first and the last
    assert torch.equal(student.blocks[1][0].weight, teacher.blocks[3][0].weight)
    settings = DistillSettings(
        loss="cosine", epochs=2, patience=0, checkpoint_dir=tmp_path / "ckpt", progress=False
    )
    first = distill(teacher, student, train, valid, settings)
    assert len(first.history) == 2
    assert (tmp_path / "ckpt" / "last.pt").is_file()
    again = derive_student(teacher, keep_layers=2)
    resumed = distill(
        teacher, again, train, valid, DistillSettings(**{**settings.__dict__, "epochs": 3})
    )
    assert resumed.resumed_from == 2
    assert resumed.history[:2] == first.history
    assert len(resumed.history) == 3
    assert resumed.untrained_value == first.untrained_value
    assert resumed.best_value >= first.best_value > first.untrained_value - 1e-6
    with pytest.raises(OptimizeError, match="has 4 layers"):
        derive_student(teacher, keep_layers=4)
    narrow = derive_student(
        teacher, keep_layers=2, width=0.5, example=(torch.from_numpy(valid["pixels"][:1]),)
    )
    assert narrow.inp.out_features == 48
    assert narrow.out.out_features == 10
