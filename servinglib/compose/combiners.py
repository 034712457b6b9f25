"""How an ensemble combines its members' answers.

Answers are numbers, (nested) lists or arrays of numbers, or objects of those; ``mean``,
``weighted_mean`` and ``max`` combine element-wise (objects key by key), ``vote`` picks the
answer with the most weight (any JSON value; objects vote key by key; a tie goes to the
earlier member)::

    >>> combine("mean", [{"score": 0.2}, {"score": 0.4}], [1.0, 1.0])
    {'score': 0.30000000000000004}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from servinglib.errors import ServinglibError

__all__ = ["CombineError", "Combiner", "combine"]

Combiner = Callable[[Sequence[Any], Sequence[float]], Any]


class CombineError(ServinglibError):
    """The members' answers do not have one shape the combiner can combine."""


def combine(kind: str, answers: Sequence[Any], weights: Sequence[float]) -> Any:
    """Combine ``answers`` (one per member, in order) with the combiner ``kind``.

    Raises:
        CombineError: the answers differ in keys or shapes, or are not numeric.
    """
    if kind == "vote":
        return _by_key(answers, weights, _vote)
    reduce = _NUMERIC[kind]
    return _by_key(answers, weights, lambda a, w: _numeric(reduce, a, w))


def _by_key(answers: Sequence[Any], weights: Sequence[float], combiner: Combiner) -> Any:
    if all(isinstance(a, Mapping) for a in answers):
        keys = list(answers[0])
        if any(list(a) != keys and set(a) != set(keys) for a in answers):
            raise CombineError(
                f"members answered objects with different keys {[sorted(a) for a in answers]}; "
                "make every member answer the same outputs"
            )
        return {k: _by_key([a[k] for a in answers], weights, combiner) for k in keys}
    return combiner(answers, weights)


def _numeric(
    reduce: Callable[[np.ndarray, np.ndarray], np.ndarray],
    answers: Sequence[Any],
    weights: Sequence[float],
) -> Any:
    try:
        stacked = np.stack([np.asarray(a, dtype=np.float64) for a in answers])
    except (ValueError, TypeError) as e:
        raise CombineError(
            f"members' answers cannot be combined element-wise ({e}); give them one numeric "
            "shape or use combiner: vote"
        ) from e
    combined = reduce(stacked, np.asarray(weights, dtype=np.float64))
    if any(isinstance(a, np.ndarray) for a in answers):
        return combined
    return combined.tolist() if combined.ndim else float(combined)


def _vote(answers: Sequence[Any], weights: Sequence[float]) -> Any:
    tally: dict[str, float] = {}
    first: dict[str, Any] = {}
    for answer, weight in zip(answers, weights, strict=True):
        plain = answer.tolist() if isinstance(answer, np.ndarray) else answer
        key = json.dumps(plain, sort_keys=True, default=str)
        tally[key] = tally.get(key, 0.0) + weight
        first.setdefault(key, answer)
    best = max(tally.values())
    return next(first[k] for k in first if tally[k] == best)  # ties: the earlier member


_NUMERIC: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "mean": lambda stacked, _weights: np.mean(stacked, axis=0),
    "weighted_mean": lambda stacked, weights: np.average(stacked, axis=0, weights=weights),
    "max": lambda stacked, _weights: np.max(stacked, axis=0),
}
