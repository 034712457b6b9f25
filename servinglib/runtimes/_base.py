"""What every tensor runtime shares: convert once in ``prepare``, one run per batch."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from servinglib.model import Model
from servinglib.runtimes._tensors import concat_batch, split_batch, to_arrays

__all__ = ["TensorModel"]


class _Prepared(dict[str, np.ndarray]):
    """Input arrays already converted and checked by :meth:`TensorModel.prepare`."""


class TensorModel(Model):
    """A model of named tensors in, named tensors out; subclasses implement :meth:`_run`."""

    _dtypes: dict[str, np.dtype[Any]]

    @abstractmethod
    def _run(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the framework on a dict of input arrays (batch on axis 0)."""

    def prepare(self, features: Any) -> dict[str, np.ndarray]:
        """Convert and check one request's tensors before it joins a batch."""
        if type(features) is _Prepared:
            return features
        return _Prepared(to_arrays(self.settings.name, features, self._dtypes, self.inputs))

    def predict(self, features: Any) -> dict[str, np.ndarray]:
        """Run on ``{input name: tensor}``; returns ``{output name: tensor}``."""
        return self._run(self.prepare(features))

    def predict_batch(self, batch: Sequence[Any]) -> list[Any]:
        """One run for the whole batch when shapes allow, else one run per request.

        (``prepare`` returns what it already prepared at once.)
        """
        if not batch:
            return []
        arrays = [self.prepare(features) for features in batch]
        merged = concat_batch(arrays)
        if merged is None:
            return [self._run(a) for a in arrays]
        stacked, sizes = merged
        return list(split_batch(self._run(stacked), sizes))
