"""Shared tensor plumbing of the runtimes: feature dicts to arrays, batching along axis 0."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from servinglib.errors import InvalidInputError
from servinglib.model import TensorSpec

__all__ = ["concat_batch", "default_threads", "split_batch", "to_arrays"]


def default_threads(workers: int) -> int:
    """Intra-op threads per worker: the cores divided among workers, at least one."""
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
    return max(1, cores // max(1, workers))


def to_arrays(
    model: str,
    features: Any,
    dtypes: Mapping[str, np.dtype[Any]],
    specs: Sequence[TensorSpec] = (),
) -> dict[str, np.ndarray]:
    """Convert ``{input name: nested list or array}`` to arrays of the graph's dtypes.

    Raises:
        InvalidInputError: names, values or shapes (checked against ``specs``) do not fit.
    """
    if not isinstance(features, Mapping):
        raise InvalidInputError(
            f"model {model!r} takes an object of input tensors {sorted(dtypes)}, "
            f"got {type(features).__name__}"
        )
    unknown = sorted(set(features) - set(dtypes))
    missing = sorted(set(dtypes) - set(features))
    if unknown or missing:
        raise InvalidInputError(
            f"model {model!r} takes inputs {sorted(dtypes)}; missing {missing}, unknown {unknown}",
            field=(missing or unknown)[0],
        )
    arrays = {}
    for name, dtype in dtypes.items():
        try:
            arrays[name] = np.asarray(features[name], dtype=dtype)
        except (TypeError, ValueError) as e:
            raise InvalidInputError(
                f"input {name!r}: cannot convert to {dtype}: {e}", field=name
            ) from e
    for spec in specs:
        if spec.name in arrays and not spec.accepts(arrays[spec.name].shape):
            shape = list(arrays[spec.name].shape)
            raise InvalidInputError(
                f"input {spec.name!r} of model {model!r} has shape {shape}; "
                f"expected {list(spec.shape)} (-1 = any size)",
                field=spec.name,
            )
    return arrays


def concat_batch(
    batch: Sequence[Mapping[str, np.ndarray]],
) -> tuple[dict[str, np.ndarray], list[int]] | None:
    """Stack requests along axis 0 when their trailing shapes agree; None when they do not."""
    names = list(batch[0])
    sizes = []
    for item in batch:
        first = item[names[0]]
        if first.ndim == 0 or any(
            item[n].ndim == 0 or item[n].shape[0] != first.shape[0] for n in names
        ):
            return None
        sizes.append(first.shape[0])
    merged = {}
    for name in names:
        parts = [item[name] for item in batch]
        if any(p.shape[1:] != parts[0].shape[1:] for p in parts):
            return None
        merged[name] = np.concatenate(parts, axis=0)
    return merged, sizes


def split_batch(
    outputs: Mapping[str, np.ndarray], sizes: Sequence[int]
) -> list[dict[str, np.ndarray]]:
    """Undo :func:`concat_batch` on the outputs."""
    bounds = np.cumsum(sizes)[:-1]
    pieces = {name: np.split(array, bounds, axis=0) for name, array in outputs.items()}
    return [{name: pieces[name][i] for name in outputs} for i in range(len(sizes))]
