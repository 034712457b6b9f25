"""Knowledge distillation: a smaller student trained to answer as the teacher does.

The student is the user's module, or one derived from the teacher by :func:`derive_student`:
the same architecture with fewer of its repeated layers (the longest ``nn.ModuleList``, e.g.
a transformer's encoder layers, evenly spaced ones kept) and optionally fewer hidden units
(the lowest-magnitude channels removed structurally), initialised from the teacher's weights.
It learns from the teacher's outputs on unlabelled inputs: ``kl`` on logits softened by a
temperature, or ``cosine`` / ``mse`` on embeddings. After every epoch it is scored on the
validation inputs (top-1 agreement with the teacher for ``kl``, mean cosine otherwise); the
best epoch is kept, training stops after ``patience`` epochs without improvement, and with a
``checkpoint_dir`` every epoch is saved so an interrupted run resumes where it stopped.

Example::

    student = derive_student(teacher, keep_layers=3)
    result = distill(teacher, student, train, valid, DistillSettings(loss="cosine"))
    print(result.untrained_value, "->", result.best_value)
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.optimize._deps import require
from servinglib.optimize._progress import Progress
from servinglib.optimize._torch_train import fit, predict, tensors
from servinglib.optimize.errors import OptimizeError

__all__ = [
    "DistillResult",
    "DistillSettings",
    "derive_student",
    "distill",
    "example_inputs",
    "score",
]

CHECKPOINT = "last.pt"


@dataclass(frozen=True)
class DistillSettings:
    """How to train the student. ``patience`` 0 never stops early."""

    loss: str = "kl"
    temperature: float = 2.0
    epochs: int = 10
    patience: int = 3
    lr: float = 1e-3
    batch_size: int = 64
    checkpoint_dir: Path | None = None
    seed: int = 0
    progress: bool = True


@dataclass(frozen=True)
class DistillResult:
    """The trained student (its best epoch) and how it got there."""

    student: Any
    metric: str
    untrained_value: float
    best_value: float
    best_epoch: int
    history: tuple[float, ...]
    resumed_from: int = 0
    stopped_early: bool = False
    teacher_params: int = 0
    student_params: int = field(default=0)


def _params(module: Any) -> int:
    return int(sum(p.numel() for p in module.parameters()))


def _layer_list(module: Any) -> tuple[Any, str, Any]:
    """The longest ModuleList in ``module``: (its parent, attribute name, the list)."""
    torch = require("torch", "deriving a student")
    best: tuple[Any, str, Any] | None = None
    for parent in module.modules():
        for name, child in parent.named_children():
            if isinstance(child, torch.nn.ModuleList) and (
                best is None or len(child) > len(best[2])
            ):
                best = (parent, name, child)
    if best is None or len(best[2]) < 2:
        raise OptimizeError(
            f"{type(module).__name__} has no nn.ModuleList of two or more layers to thin; "
            "pass your own --student module instead"
        )
    return best


def derive_student(
    teacher: Any, *, keep_layers: int | None = None, width: float = 1.0, example: Any = None
) -> Any:
    """A copy of ``teacher`` with ``keep_layers`` of its repeated layers and ``width`` units.

    Kept layers are evenly spaced and include the first and the last. ``width`` below 1
    removes the lowest-magnitude hidden units of every layer but the output one
    (``example``: a tuple of input tensors, needed then).

    Raises:
        OptimizeError: no repeated layers, a count out of range, or width without example.
    """
    student = copy.deepcopy(teacher)
    if keep_layers is not None:
        torch = require("torch", "deriving a student")
        parent, name, layers = _layer_list(student)
        if not 1 <= keep_layers < len(layers):
            raise OptimizeError(
                f"keep_layers {keep_layers}: the teacher has {len(layers)} layers in "
                f"{name!r}; keep between 1 and {len(layers) - 1}"
            )
        chosen = np.round(np.linspace(0, len(layers) - 1, keep_layers)).astype(int)
        setattr(parent, name, torch.nn.ModuleList([layers[int(i)] for i in chosen]))
        config = getattr(student, "config", None)
        if config is not None and hasattr(config, "num_hidden_layers"):
            config.num_hidden_layers = keep_layers
    if width < 1.0:
        if example is None:
            raise OptimizeError("a narrower student needs example inputs to trace")
        from servinglib.optimize.prune import prune_channels

        prune_channels(student, example, 1.0 - width)
    return student.eval()


def score(metric: str, student_out: Any, teacher_out: Any) -> float:
    """``agreement`` (top-1 equal to the teacher's) or mean ``cosine`` to the teacher."""
    torch = require("torch", "scoring a student")
    if metric == "agreement":
        return float((student_out.argmax(-1) == teacher_out.argmax(-1)).float().mean())
    s, t = student_out.flatten(1), teacher_out.flatten(1)
    return float(torch.nn.functional.cosine_similarity(s, t, dim=-1).mean())


def distill(
    teacher: Any,
    student: Any,
    train: Mapping[str, np.ndarray],
    valid: Mapping[str, np.ndarray],
    settings: DistillSettings | None = None,
) -> DistillResult:
    """Train ``student`` (in place) on the teacher's outputs; returns it at its best epoch.

    Raises:
        OptimizeError: torch missing, a bad loss, or a checkpoint that does not fit.
    """
    settings = settings or DistillSettings()
    torch = require("torch", "distillation")
    if settings.loss not in ("kl", "mse", "cosine"):
        raise OptimizeError(f"loss {settings.loss!r}: use kl (logits), mse or cosine")
    torch.manual_seed(settings.seed)
    metric = "agreement" if settings.loss == "kl" else "cosine"
    inputs, held_out = list(train.values()), list(valid.values())
    teacher.eval()
    target = predict(teacher, held_out)
    train_targets = predict(teacher, inputs)  # once: the teacher does not change
    state = _resume(student, settings.checkpoint_dir)
    optimizer = torch.optim.Adam(student.parameters(), lr=settings.lr)
    if state:
        optimizer.load_state_dict(state["optimizer"])
    untrained = state.get("untrained", score(metric, predict(student, held_out), target))
    history: list[float] = list(state.get("history", []))
    best_value = state.get("best_value", -np.inf)
    best_state = state.get("best_state") or copy.deepcopy(student.state_dict())
    start = len(history)
    progress = Progress(settings.epochs, enabled=settings.progress, description="distill")
    progress.advance_to(start, f"resumed at epoch {start}" if start else "start")
    stopped = False
    try:
        for epoch in range(start, settings.epochs):
            if _since_best(history) >= settings.patience > 0:
                stopped = True
                break
            fit(
                student,
                teacher,
                inputs,
                labels=None,
                loss=settings.loss,
                epochs=1,
                lr=settings.lr,
                batch_size=settings.batch_size,
                temperature=settings.temperature,
                seed=settings.seed + epoch,
                optimizer=optimizer,
                targets=train_targets,
            )
            value = score(metric, predict(student, held_out), target)
            history.append(value)
            if value > best_value:
                best_value, best_state = value, copy.deepcopy(student.state_dict())
            _save(
                settings.checkpoint_dir,
                student,
                optimizer,
                history,
                best_value,
                best_state,
                untrained,
            )
            progress.step(f"epoch {epoch + 1}: {metric} {value:.4f}")
    finally:
        progress.close(finished=True)
    student.load_state_dict(best_state)
    student.eval()
    return DistillResult(
        student=student,
        metric=metric,
        untrained_value=float(untrained),
        best_value=float(best_value),
        best_epoch=int(np.argmax(history)) + 1 if history else 0,
        history=tuple(history),
        resumed_from=start,
        stopped_early=stopped,
        teacher_params=_params(teacher),
        student_params=_params(student),
    )


def _since_best(history: Sequence[float]) -> int:
    """Epochs since the best one (0 when the last epoch is the best)."""
    return len(history) - 1 - int(np.argmax(history)) if history else 0


def _resume(student: Any, directory: Path | None) -> dict[str, Any]:
    torch = require("torch", "distillation")
    path = directory / CHECKPOINT if directory is not None else None
    if path is None or not path.is_file():
        return {}
    state: dict[str, Any] = torch.load(str(path), map_location="cpu", weights_only=True)
    try:
        student.load_state_dict(state["student"])
    except (RuntimeError, KeyError) as e:
        raise OptimizeError(
            f"checkpoint {path} does not fit this student ({str(e).splitlines()[0]}); "
            "use another --checkpoint-dir or delete it to start over"
        ) from e
    return state


def _save(
    directory: Path | None,
    student: Any,
    optimizer: Any,
    history: list[float],
    best_value: float,
    best_state: Any,
    untrained: float,
) -> None:
    if directory is None:
        return
    torch = require("torch", "distillation")
    directory.mkdir(parents=True, exist_ok=True)
    staged = directory / (CHECKPOINT + ".tmp")
    torch.save(
        {
            "student": student.state_dict(),
            "optimizer": optimizer.state_dict(),
            "history": history,
            "best_value": best_value,
            "best_state": best_state,
            "untrained": untrained,
        },
        str(staged),
    )
    staged.replace(directory / CHECKPOINT)  # never a half-written checkpoint


def example_inputs(inputs: Mapping[str, np.ndarray]) -> tuple[Any, ...]:
    """One sample of each input as tensors (what tracing needs)."""
    return tuple(tensors(list(inputs.values()), slice(0, 1)))
