"""Open Inference requests that carry a batch dimension the model's inputs do not declare.

Triton clients send ``[b, *shape]`` to a model whose configuration says ``max_batch_size``
> 0. A servinglib Python model that batches declares its inputs per item (``(1,)`` for one
text); the server then answers such a request row by row, each row a request of its own
for the model's batcher, and stacks the rows' outputs back along a new first dimension.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from servinglib.errors import InvalidInputError
from servinglib.model import TensorSpec

__all__ = ["split_rows", "splits_rows", "stack_rows"]


def split_rows(
    tensors: Mapping[str, np.ndarray], specs: Sequence[TensorSpec], max_batch_size: int
) -> list[dict[str, np.ndarray]] | None:
    """The request's rows, or None when its tensors have the declared rank (no batch dim).

    Raises:
        InvalidInputError: the leading dimensions differ between inputs, or pass
            ``max_batch_size``.
    """
    declared = {spec.name: spec for spec in specs}
    batched = {
        name: array
        for name, array in tensors.items()
        if name in declared and array.ndim == len(declared[name].shape) + 1
    }
    if not batched:
        return None
    if len(batched) != len(tensors):
        raise InvalidInputError(
            f"inputs {sorted(batched)} carry a batch dimension but "
            f"{sorted(set(tensors) - set(batched))} do not; add it to every input or to none"
        )
    sizes = {array.shape[0] for array in batched.values()}
    if len(sizes) != 1:
        raise InvalidInputError(
            f"the inputs' batch dimensions differ ({sorted(sizes)}); send the same number of "
            "rows in every input"
        )
    rows = sizes.pop()
    if not 1 <= rows <= max_batch_size:
        raise InvalidInputError(
            f"a request carries {rows} rows; this model takes 1 to {max_batch_size} "
            "(max_batch_size in its config); split the request"
        )
    return [{name: array[i] for name, array in batched.items()} for i in range(rows)]


def stack_rows(outputs: Sequence[Any]) -> dict[str, np.ndarray]:
    """One output dict from per-row output dicts, each tensor gaining a leading dimension.

    Raises:
        TypeError: a row's output is not a dict with the same names as the first row's.
    """
    first = outputs[0]
    if not all(isinstance(o, dict) and o.keys() == first.keys() for o in outputs):
        raise TypeError("predict() must return a dict with the same tensor names for every row")
    return {name: np.stack([np.asarray(o[name]) for o in outputs]) for name in first}


def splits_rows(inputs: Sequence[TensorSpec], batching: object | None) -> bool:
    """True when a batching model's inputs have no batch dimension of their own.

    ``batching`` is the model's batching policy (None: the model does not batch).

    Then a request may add one (``[b, *shape]``, b <= max_batch_size) and the server answers
    each row as its own request, batched with everyone else's.
    """
    return (
        batching is not None
        and bool(inputs)
        and not all(spec.shape and spec.shape[0] == -1 for spec in inputs)
    )
