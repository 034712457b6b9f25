"""Shared tensor plumbing of the runtimes: feature dicts to arrays, batching along axis 0."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from servinglib.errors import InvalidInputError
from servinglib.model import TensorSpec
from servinglib.wire.tensor_checks import check_finite

__all__ = [
    "check_shared_dimensions",
    "concat_batch",
    "default_threads",
    "pad_sequences",
    "shared_dimensions",
    "split_batch",
    "stack_arrays",
    "to_arrays",
    "trim_sequences",
]


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
        InvalidInputError: names, values or shapes (checked against ``specs``) do not fit,
            or a number is not finite in the input's dtype (1e300 as float32).
    """
    if type(features) is not dict and not isinstance(features, Mapping):
        raise InvalidInputError(
            f"model {model!r} takes an object of input tensors {sorted(dtypes)}, "
            f"got {type(features).__name__}"
        )
    if len(features) != len(dtypes) or not all(name in features for name in dtypes):
        unknown = sorted(set(features) - set(dtypes))
        missing = sorted(set(dtypes) - set(features))
        raise InvalidInputError(
            f"model {model!r} takes inputs {sorted(dtypes)}; missing {missing}, unknown {unknown}",
            field=(missing or unknown)[0],
        )
    arrays = {}
    for name, dtype in dtypes.items():
        value = features[name]
        if type(value) is np.ndarray and value.dtype == dtype:
            arrays[name] = value  # e.g. an Open Inference tensor: nothing to convert
        else:
            try:
                with np.errstate(over="ignore"):  # overflow becomes infinity, refused below
                    arrays[name] = np.asarray(value, dtype=dtype)
            except (TypeError, ValueError, OverflowError) as e:
                raise InvalidInputError(
                    f"input {name!r}: cannot convert to {dtype}: {e}", field=name
                ) from e
        if arrays[name].dtype.kind != "f":
            continue  # only floats hold NaN or Infinity (and the message costs a dtype str)
        try:
            check_finite(arrays[name], f"input {name!r} of model {model!r} (as {dtype})")
        except InvalidInputError as e:
            raise InvalidInputError(str(e), field=name) from None
    for spec in specs:
        if spec.name in arrays:
            spec.check(model, arrays[spec.name].shape)
    return arrays


def shared_dimensions(shapes: Mapping[str, Sequence[Any]]) -> dict[str, list[tuple[str, int]]]:
    """The named dimensions more than one input axis shares: ``{name: [(input, axis), ...]}``.

    A graph names its variable dimensions (``input_ids: [batch, sequence]``); axes of the same
    name must have the same size, which a framework may only find out deep in the graph.
    """
    places: dict[str, list[tuple[str, int]]] = {}
    for name, shape in shapes.items():
        for axis, dim in enumerate(shape):
            if isinstance(dim, str) and dim:
                places.setdefault(dim, []).append((name, axis))
    return {dim: axes for dim, axes in places.items() if len(axes) > 1}


def check_shared_dimensions(
    model: str,
    arrays: Mapping[str, np.ndarray],
    shared: Mapping[str, Sequence[tuple[str, int]]],
    offset: int = 0,
) -> None:
    """Refuse inputs whose axes of the same named dimension differ in size.

    ``offset`` shifts every axis (1 for arrays that stack many requests on a new axis 0).

    Raises:
        InvalidInputError: naming the dimension, the inputs and their sizes.
    """
    for dim, axes in shared.items():
        sizes = {
            (name, axis): arrays[name].shape[axis + offset]
            for name, axis in axes
            if name in arrays and arrays[name].ndim > axis + offset
        }
        if len(set(sizes.values())) > 1:
            listed = ", ".join(f"{name!r} has {size}" for (name, _), size in sizes.items())
            raise InvalidInputError(
                f"inputs of model {model!r} share the dimension {dim!r}, but {listed}; "
                "send them with equal sizes",
                field=axes[0][0],
            )


def stack_arrays(
    model: str,
    batch: Sequence[Any],
    dtypes: Mapping[str, np.dtype[Any]],
    specs: Sequence[TensorSpec] = (),
) -> dict[str, np.ndarray] | None:
    """:func:`to_arrays` of every request in ``batch``, each input stacked on a new axis 0.

    Row ``i`` of each array is what :func:`to_arrays` makes of ``batch[i]``. None when the
    requests cannot be converted together (other keys, shapes that differ, a value that
    does not convert or is not finite): convert them one by one, which names the culprit.
    """
    names = set(dtypes)
    if any(dtype.kind not in "biuf" for dtype in dtypes.values()):
        return None  # strings: numpy would make ragged rows an array of lists, not refuse them
    if not batch or not all(type(f) is dict and f.keys() == names for f in batch):
        return None
    arrays = {}
    for name, dtype in dtypes.items():
        values = [features[name] for features in batch]
        first = values[0]
        if type(first) is np.ndarray and not all(
            type(v) is np.ndarray and v.shape == first.shape for v in values
        ):
            return None
        try:
            with np.errstate(over="ignore"):
                array = np.asarray(values, dtype=dtype)
            check_finite(array, name)
            row = to_arrays(model, {name: first}, {name: dtype}, specs)[name]
        except (TypeError, ValueError, OverflowError, InvalidInputError):
            return None
        if array.ndim < 2 or array.shape[1:] != row.shape:
            # scalars (rows of a 1-d array are NumPy scalars, not arrays), or a ragged or
            # scalar-and-list mix numpy happened to accept
            return None
        arrays[name] = array
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
    stops = np.cumsum(sizes).tolist()
    starts = [0, *stops[:-1]]
    # slices, not np.split: the same views, without its per-piece swapaxes calls
    return [
        {name: array[start:stop] for name, array in outputs.items()}
        for start, stop in zip(starts, stops, strict=True)
    ]


def pad_sequences(
    batch: Sequence[Mapping[str, np.ndarray]], pad_values: Mapping[str, float]
) -> tuple[list[dict[str, np.ndarray]], int, list[int]] | None:
    """Pad the inputs named in ``pad_values`` along axis 1 to the batch's longest sequence.

    Returns the padded requests, the padded length and each request's own length, or None
    when nothing needs padding (every sequence is as long, or no input is named).
    """
    names = [n for n in pad_values if all(n in item and item[n].ndim >= 2 for item in batch)]
    if not names:
        return None
    lengths = [int(item[names[0]].shape[1]) for item in batch]
    if any(
        int(item[n].shape[1]) != length
        for n in names
        for item, length in zip(batch, lengths, strict=True)
    ):
        return None  # padded inputs of one request disagree: let the model complain alone
    longest = max(lengths)
    if min(lengths) == longest:
        return None
    padded = []
    for item, length in zip(batch, lengths, strict=True):
        copy = dict(item)
        if length < longest:
            for name in names:
                array = item[name]
                width = [(0, 0)] * array.ndim
                width[1] = (0, longest - length)
                copy[name] = np.pad(array, width, constant_values=pad_values[name])
        padded.append(copy)
    return padded, longest, lengths


def trim_sequences(
    outputs: list[dict[str, np.ndarray]], longest: int, lengths: Sequence[int]
) -> list[dict[str, np.ndarray]]:
    """Cut per-token outputs (axis 1 as long as the padded batch) back to each request's length."""
    trimmed = []
    for answer, length in zip(outputs, lengths, strict=True):
        trimmed.append(
            {
                name: array[:, :length] if array.ndim >= 2 and array.shape[1] == longest else array
                for name, array in answer.items()
            }
        )
    return trimmed
