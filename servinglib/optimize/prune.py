"""Structured pruning: whole channels, neurons or attention heads removed, fine-tuned, measured.

``torch-pruning``'s dependency graph removes the lowest-importance output channels of each
convolution and neurons of each linear layer together with every weight that depends on
them (the next layer's inputs, batch norms, residual partners), so the result is a dense,
smaller module that ONNX Runtime runs faster; zeroed weights (unstructured sparsity) would
not be. Importance is ``magnitude`` (L2 norm of each channel's weights) or ``taylor``
(|weight x gradient| on the user's training data: labels, or the original's predictions).
With ``structure="heads"`` whole attention heads of BERT-style transformers are removed
instead (:mod:`.heads`), the hidden size and feed-forward layers left whole.

The ratios are visited in increasing order, each from the previous fine-tuned result
(iterative prune → fine-tune): a share ``ratio`` of the original's channels (or heads) is
removed from every layer but the output layer, then the module is fine-tuned on the training
data (labels with ``ce``, otherwise the original model as teacher). Each candidate is
exported to ONNX, judged on the validation data against the unpruned ONNX model with the
metric rules of ``optimize run`` (``accuracy`` with labels, else ``top1`` agreement or
``cosine``), and all of them are timed interleaved with the unpruned model. The chosen point
is the smallest candidate within every budget; when none is, nothing is written and every
candidate is listed with its figures.

Example::

    outcome = prune_model(module, data, Path("pruned/model.onnx"),
                          PruneSettings(ratios=(0.25, 0.5), output_names=("logits",)))
    print(outcome.chosen.ratio if outcome.chosen else outcome.failures)
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.optimize._deps import require
from servinglib.optimize._files import StagedOutput, copy_model, model_size_mb
from servinglib.optimize._progress import Progress
from servinglib.optimize._torch_train import first_output, fit, loss_for_metric, tensors
from servinglib.optimize.candidates import (
    Candidate,
    choose_smallest,
    evaluate_onnx,
    measure_candidates,
)
from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.export import export_module
from servinglib.optimize.heads import attention_blocks, prune_heads
from servinglib.optimize.measure import MeasureSettings

__all__ = [
    "IMPORTANCES",
    "STRUCTURES",
    "PruneData",
    "PruneOutcome",
    "PruneSettings",
    "prune_channels",
    "prune_model",
]

IMPORTANCES = ("magnitude", "taylor")
STRUCTURES = ("channels", "heads")


@dataclass(frozen=True)
class PruneData:
    """Training and validation inputs (``{input name: array}``, axis 0 = samples) and labels."""

    train: Mapping[str, np.ndarray]
    valid: Mapping[str, np.ndarray]
    train_labels: np.ndarray | None = None
    valid_labels: np.ndarray | None = None


@dataclass(frozen=True)
class PruneSettings:
    """What to prune, how to fine-tune, the budgets, and how to measure.

    Attributes:
        ratios: shares of each layer's channels (or heads) to remove, each from 0 to 0.95.
        structure: ``channels`` (channels and neurons) or ``heads`` (attention heads).
        importance: ``magnitude`` or ``taylor``.
        epochs: fine-tuning epochs after each pruning step (0: none).
        keep: module names never pruned (the output layer is always kept).
        max_loss: the accuracy budget (loss of the metric against the unpruned model).
        metric: ``auto`` (accuracy with labels, top1 for class scores, else cosine),
            ``accuracy``, ``top1`` or ``cosine``.
    """

    ratios: tuple[float, ...] = (0.25, 0.5, 0.75)
    importance: str = "magnitude"
    structure: str = "channels"
    epochs: int = 3
    lr: float = 1e-3
    batch_size: int = 64
    temperature: float = 2.0
    keep: tuple[str, ...] = ()
    max_loss: float = 0.01
    max_size_mb: float | None = None
    max_latency_ms: float | None = None
    metric: str = "auto"
    output_names: tuple[str, ...] = ("output",)
    dynamic_axes: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    allow_trace_warnings: bool = False
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    seed: int = 0
    progress: bool = True


@dataclass(frozen=True)
class PruneOutcome:
    """Every candidate (the unpruned model first), the chosen one, the verdict, the model."""

    candidates: tuple[Candidate, ...]
    chosen: Candidate | None
    metric: str
    model: Path | None
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        """True when a candidate met every budget and was written."""
        return not self.failures


def _check(settings: PruneSettings, data: PruneData) -> None:
    bad = [r for r in settings.ratios if not 0 < r <= 0.95]
    if not settings.ratios or bad:
        raise OptimizeError(f"prune ratios {list(settings.ratios)}: give shares in (0, 0.95]")
    if settings.importance not in IMPORTANCES:
        raise OptimizeError(
            f"importance {settings.importance!r}: use one of {', '.join(IMPORTANCES)}"
        )
    if settings.structure not in STRUCTURES:
        raise OptimizeError(f"structure {settings.structure!r}: use one of {', '.join(STRUCTURES)}")
    if settings.metric not in ("auto", "accuracy", "top1", "cosine"):
        raise OptimizeError(f"metric {settings.metric!r}: use auto, accuracy, top1 or cosine")
    if settings.metric == "accuracy" and data.valid_labels is None:
        raise OptimizeError("metric accuracy needs validation labels (a `labels` array)")
    if list(data.train) != list(data.valid):
        raise OptimizeError(
            f"training inputs {list(data.train)} and validation inputs {list(data.valid)} "
            "differ: give both files the same arrays"
        )


def _metric(settings: PruneSettings, data: PruneData, reference: np.ndarray) -> str:
    if settings.metric != "auto":
        return settings.metric
    if data.valid_labels is not None:
        return "accuracy"
    classes = reference.ndim == 2 and reference.shape[1] > 1
    return "top1" if classes and np.issubdtype(reference.dtype, np.floating) else "cosine"


def _output_layer(module: Any) -> Any:
    """The last convolution or linear layer: its width is the model's output, kept whole."""
    torch = require("torch", "pruning a PyTorch model")
    layers = [m for m in module.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    if not layers:
        raise OptimizeError(f"{type(module).__name__} has no Linear or Conv2d layer to prune")
    return layers[-1]


def _ignored(module: Any, keep: tuple[str, ...]) -> list[Any]:
    named = dict(module.named_modules())
    missing = [name for name in keep if name not in named]
    if missing:
        raise OptimizeError(f"--keep {missing[0]!r}: no such module; it has {list(named)[1:9]}")
    return [_output_layer(module), *(named[name] for name in keep)]


def prune_channels(
    module: Any,
    example: tuple[Any, ...],
    share: float,
    *,
    importance: str = "magnitude",
    keep: tuple[str, ...] = (),
    train: Sequence[np.ndarray] = (),
    labels: np.ndarray | None = None,
) -> None:
    """Remove ``share`` of the current channels of each prunable layer of ``module``, in place.

    ``taylor`` scores channels by |weight x gradient| of the cross-entropy on up to 256
    ``train`` samples against ``labels`` (or the module's own predictions).
    """
    tp = require("torch_pruning", "structured pruning (pip install 'servinglib[prune]')")
    if importance == "taylor":
        scorer = tp.importance.GroupTaylorImportance()
    else:
        scorer = tp.importance.GroupMagnitudeImportance(p=2)
    pruner = tp.pruner.MetaPruner(
        module,
        example,
        importance=scorer,
        pruning_ratio=share,
        ignored_layers=_ignored(module, keep),
    )
    if importance == "taylor":
        _gradients(module, train, labels)
    pruner.step()
    module.zero_grad()


def _gradients(module: Any, train: Sequence[np.ndarray], labels: np.ndarray | None) -> None:
    """Leave on the weights the gradient of the cross-entropy on up to 256 samples."""
    torch = require("torch", "pruning a PyTorch model")
    rows = slice(0, min(len(train[0]), 256))
    module.zero_grad()
    logits = first_output(module(*tensors(train, rows)))
    if labels is not None:
        targets = torch.from_numpy(labels[rows].astype(np.int64))
    else:
        targets = logits.detach().argmax(dim=-1)  # the original's own predictions
    torch.nn.functional.cross_entropy(logits, targets).backward()


def _prune_step(
    module: Any,
    example: tuple[Any, ...],
    share: float,
    settings: PruneSettings,
    data: PruneData,
) -> None:
    """One pruning step of ``settings.structure``, in place."""
    train = list(data.train.values())
    if settings.structure == "channels":
        prune_channels(
            module,
            example,
            share,
            importance=settings.importance,
            keep=settings.keep,
            train=train,
            labels=data.train_labels,
        )
        return
    if settings.importance == "taylor":
        _gradients(module, train, data.train_labels)
    prune_heads(module, share, importance=settings.importance)
    module.zero_grad()


def prune_model(
    module: Any,
    data: PruneData,
    destination: Path,
    settings: PruneSettings | None = None,
) -> PruneOutcome:
    """Prune ``module`` at each ratio, fine-tune, export, judge, measure; write the chosen.

    ``destination`` (ONNX) is written only when a candidate meets every budget.

    Raises:
        OptimizeError: torch or torch-pruning missing, bad settings or data, or an export
            that fails.
    """
    settings = settings or PruneSettings()
    _check(settings, data)
    torch = require("torch", "pruning a PyTorch model")
    tp = require("torch_pruning", "structured pruning (pip install 'servinglib[prune]')")
    torch.manual_seed(settings.seed)
    teacher = copy.deepcopy(module).eval()
    student = copy.deepcopy(module).eval()
    if settings.structure == "heads":
        attention_blocks(student)  # fails now, before any export, when there are none
    train = list(data.train.values())
    example = tuple(tensors(list(data.valid.values()), slice(0, 1)))
    sample = {name: array[:2] for name, array in data.valid.items()}
    ratios = sorted(settings.ratios)
    progress = Progress(len(ratios) + 3, enabled=settings.progress, description="prune")
    finished = False
    try:
        with tempfile.TemporaryDirectory(prefix="servinglib-prune-") as tmp:
            work = Path(tmp)
            base_path = work / "ratio-0.onnx"
            _export(teacher, sample, base_path, settings)
            reference = evaluate_onnx(base_path, data.valid)
            metric = _metric(settings, data, reference)
            loss = loss_for_metric(metric, data.train_labels is not None)
            macs, params = tp.utils.count_ops_and_params(teacher, example)
            found = [Candidate(0.0, base_path, int(params), int(macs), model_size_mb(base_path))]
            progress.step("unpruned model exported")
            done = 0.0
            for ratio in ratios:
                share = 1 - (1 - ratio) / (1 - done)  # of what the previous step left
                _prune_step(student, example, share, settings, data)
                done = ratio
                fit(
                    student,
                    teacher,
                    train,
                    labels=data.train_labels,
                    loss=loss,
                    epochs=settings.epochs,
                    lr=settings.lr,
                    batch_size=settings.batch_size,
                    temperature=settings.temperature,
                    seed=settings.seed,
                )
                path = work / f"ratio-{ratio:g}.onnx"
                _export(student, sample, path, settings)
                macs, params = tp.utils.count_ops_and_params(student, example)
                found.append(Candidate(ratio, path, int(params), int(macs), model_size_mb(path)))
                progress.step(f"pruned {ratio:.0%} of {settings.structure}, fine-tuned, exported")
            scored = measure_candidates(
                found, data.valid, data.valid_labels, reference, metric, settings.measure
            )
            progress.step("measured interleaved")
            chosen, failures = choose_smallest(
                scored, settings.max_loss, settings.max_size_mb, settings.max_latency_ms
            )
            if chosen is not None:
                with StagedOutput(destination) as staged:
                    copy_model(chosen.path, staged.path)
                    staged.commit()
            progress.step("chosen" if chosen else "no candidate fits")
            finished = True
    finally:
        progress.close(finished=finished)
    return PruneOutcome(
        candidates=tuple(scored),
        chosen=chosen,
        metric=metric,
        model=destination if chosen else None,
        failures=tuple(failures),
    )


def _export(module: Any, sample: Mapping[str, np.ndarray], path: Path, s: PruneSettings) -> None:
    export_module(
        module,
        dict(sample),
        path,
        output_names=list(s.output_names),
        dynamic_axes=s.dynamic_axes,
        allow_trace_warnings=s.allow_trace_warnings,
    )
