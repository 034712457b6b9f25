"""The default metric (``--metric auto``): chosen from what the judged output holds.

A metric must be able to see the errors quantization makes on that kind of output: the
cosine of two one-value outputs is 1 whenever they have the same sign, so it is blind to a
scalar regressor being off by a minute. The rules, first match wins:

0. integer (or boolean) values: ids, counts, class indices → ``exact`` agreement with FP32;
1. one value per sample (a scalar, ``[1, 1]``): a regression output → ``relative-error``;
2. labels given and a vector per sample: a classifier → ``top1`` (accuracy reported next to it);
3. the output's name says it (``logits``, ``probs``, ``class``, ``score`` → ``top1``;
   ``embedding``, ``features``, ``vector``, ``hidden`` → ``cosine``);
4. rows of length 1 after L2 normalization → embeddings → ``cosine``; rows that are
   probabilities (≥ 0, summing to 1) → ``top1``;
5. otherwise a multi-value regression output → ``relative-error``.

Example::

    metric, reason = choose_metric("auto", fp32_outputs, labels=None, output="eta_seconds")
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from servinglib.optimize.accuracy import is_user_metric

__all__ = ["choose_metric"]

_CLASSIFICATION = re.compile(r"logit|prob|class|score|label", re.IGNORECASE)
_EMBEDDING = re.compile(r"embed|feature|vector|hidden|encod", re.IGNORECASE)


def choose_metric(
    metric: str,
    reference: Sequence[np.ndarray],
    *,
    labels: np.ndarray | None,
    output: str,
) -> tuple[str, str]:
    """The metric to use and, in words, why."""
    if is_user_metric(metric):
        return metric, f"the user metric named by --metric {metric}"
    if metric != "auto":
        return metric, f"named by --metric {metric}"
    if reference and all(o.dtype.kind in "biu" for o in reference):
        return "exact", (
            f"output {output!r} holds integers (ids, counts or class indices): the share of "
            "samples equal to FP32's exactly"
        )
    sizes = {int(o.size) for o in reference}
    if sizes == {1}:
        return "relative-error", (
            f"output {output!r} has one value per sample (regression): cosine cannot see "
            "errors in one value, so RMSE relative to the FP32 spread and rank correlation"
        )
    last = {int(o.shape[-1]) if o.ndim else 1 for o in reference}
    if labels is not None and len(last) == 1 and last != {1}:
        return "top1", f"labels given and output {output!r} has one score per class"
    if _CLASSIFICATION.search(output):
        return "top1", f"output {output!r} is named as class scores: top-1 agreement with FP32"
    if _EMBEDDING.search(output):
        return "cosine", f"output {output!r} is named as an embedding: cosine similarity"
    rows = np.concatenate([o.reshape(-1, o.shape[-1]).astype(np.float64) for o in reference])
    norms = np.linalg.norm(rows, axis=1)
    if rows.shape[1] > 1 and np.allclose(norms, 1.0, atol=1e-3):
        return "cosine", f"output {output!r} rows have unit length (embeddings): cosine"
    if rows.shape[1] > 1 and rows.min() >= 0 and np.allclose(rows.sum(axis=1), 1.0, atol=1e-3):
        return "top1", f"output {output!r} rows are probabilities: top-1 agreement with FP32"
    return "relative-error", (
        f"output {output!r} holds several values per sample that are neither class scores "
        "nor unit-length embeddings (regression): RMSE relative to the FP32 spread and rank "
        "correlation"
    )
