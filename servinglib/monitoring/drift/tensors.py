"""Open Inference tensors as the profiled features they carry.

A profile names features (the reference's columns); an Open Inference request carries
tensors. :func:`tensor_features` maps one onto the other:

- a tensor named like a profiled feature is that feature: its value when it holds one
  element (``[1]``, ``[1, 1]``; ``BYTES`` decoded as UTF-8), else the array (for ``length``
  and ``norm`` features: token ids, embeddings);
- a tensor named otherwise whose elements, once any leading dimensions of size 1 are
  dropped, are one per profiled feature (``[1, N]`` or ``[N]``: how KServe's and Triton's
  clients send a table row) holds the features by position, in the profile's order (the
  reference's column order);
- any other tensor keeps its name (an unprofiled field).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["Tensors", "tensor_features"]


class Tensors(dict[str, Any]):
    """A request's decoded Open Inference tensors, queued for :func:`tensor_features`."""


def tensor_features(tensors: Mapping[str, Any], features: Sequence[str]) -> dict[str, Any]:
    """The profiled features ``tensors`` carry (see the module docstring)."""
    named = set(features)
    found: dict[str, Any] = {}
    for name, value in tensors.items():
        if not isinstance(value, np.ndarray):
            found[name] = value
        elif name in named:
            found[name] = _element(value.reshape(-1)[0]) if value.size == 1 else value
        elif value.size == len(features) and value.size > 1 and _one_row(value.shape):
            for feature, element in zip(features, value.reshape(-1), strict=True):
                found.setdefault(feature, _element(element))
        else:
            found[name] = value
    return found


def _one_row(shape: tuple[int, ...]) -> bool:
    """Whether every dimension but the last is 1 (one row of features)."""
    return all(size == 1 for size in shape[:-1])


def _element(element: Any) -> Any:
    value = element.item() if isinstance(element, np.generic) else element
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value
