"""Training helpers shared by pruning and distillation: arrays in, a module fitted, seeded.

Data are NumPy arrays, one per module input (axis 0 = samples), as ``.npz`` files hold them.
A module may return a tensor or a tuple; the first element is the one trained and judged.
Losses against a teacher (``kl`` on logits with a temperature, ``mse``, ``cosine``) need no
labels; ``ce`` trains on labels.

Example::

    fit(student, teacher, inputs, labels=None, loss="kl", epochs=3, lr=1e-3, batch_size=64)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from servinglib.optimize._deps import require
from servinglib.optimize.errors import OptimizeError

__all__ = ["LOSSES", "batch_loss", "first_output", "fit", "loss_for_metric", "predict", "tensors"]

LOSSES = ("ce", "kl", "mse", "cosine")


def first_output(result: Any) -> Any:
    """The first tensor a module returns (the one trained and judged)."""
    return result[0] if isinstance(result, (tuple, list)) else result


def tensors(arrays: Sequence[np.ndarray], rows: Any = None) -> list[Any]:
    """Torch tensors of ``arrays`` (optionally only ``rows``)."""
    torch = require("torch", "training a PyTorch model")
    return [torch.from_numpy(np.ascontiguousarray(a if rows is None else a[rows])) for a in arrays]


def loss_for_metric(metric: str, labelled: bool) -> str:
    """The training loss matching how the result is judged: ce, kl or cosine."""
    if metric == "accuracy" and labelled:
        return "ce"
    return "kl" if metric in ("accuracy", "top1") else "cosine"


def batch_loss(kind: str, student: Any, teacher: Any, labels: Any, temperature: float = 2.0) -> Any:
    """The loss of one batch: student output against the teacher's (or the labels for ce)."""
    torch = require("torch", "training a PyTorch model")
    functional = torch.nn.functional
    if kind == "ce":
        if labels is None:
            raise OptimizeError("loss `ce` needs labels; pass labels or use kl, mse or cosine")
        return functional.cross_entropy(student, labels)
    if kind == "kl":
        t = temperature
        return (
            functional.kl_div(
                functional.log_softmax(student / t, dim=-1),
                functional.softmax(teacher / t, dim=-1),
                reduction="batchmean",
            )
            * t
            * t
        )
    if kind == "mse":
        return functional.mse_loss(student, teacher)
    if kind == "cosine":
        flat_s, flat_t = student.flatten(1), teacher.flatten(1)
        return (1 - functional.cosine_similarity(flat_s, flat_t, dim=-1)).mean()
    raise OptimizeError(f"unknown loss {kind!r}; use one of {', '.join(LOSSES)}")


def predict(module: Any, inputs: Sequence[np.ndarray], batch_size: int = 256) -> Any:
    """The module's first output on every sample (no gradients), concatenated."""
    torch = require("torch", "running a PyTorch model")
    count = len(inputs[0])
    parts = []
    module.eval()
    with torch.no_grad():
        for start in range(0, count, batch_size):
            rows = slice(start, start + batch_size)
            parts.append(first_output(module(*tensors(inputs, rows))))
    return torch.cat(parts)


def fit(
    student: Any,
    teacher: Any | None,
    inputs: Sequence[np.ndarray],
    *,
    labels: np.ndarray | None,
    loss: str,
    epochs: int,
    lr: float,
    batch_size: int,
    temperature: float = 2.0,
    seed: int = 0,
    optimizer: Any = None,
    targets: Any = None,
) -> Any:
    """Train ``student`` for ``epochs`` (Adam, shuffled batches); returns the optimizer.

    The teacher's outputs are computed once, up front (it does not change), unless given
    as ``targets`` (a caller training epoch by epoch computes them once for all).
    """
    torch = require("torch", "training a PyTorch model")
    if targets is None and teacher is not None and loss != "ce":
        targets = predict(teacher, inputs)
    label_tensor = torch.from_numpy(labels.astype(np.int64)) if labels is not None else None
    optimizer = optimizer or torch.optim.Adam(student.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    count = len(inputs[0])
    for _ in range(epochs):
        student.train()
        order = rng.permutation(count)
        for start in range(0, count, batch_size):
            rows = order[start : start + batch_size]
            out = first_output(student(*tensors(inputs, rows)))
            target = targets[rows] if targets is not None else None
            batch_labels = label_tensor[rows] if label_tensor is not None else None
            value = batch_loss(loss, out, target, batch_labels, temperature)
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
    student.eval()
    return optimizer
