"""What every tensor runtime shares: convert once in ``prepare``, one run per batch."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from servinglib.errors import InvalidInputError, ModelLoadError
from servinglib.model import Model
from servinglib.runtimes._tensors import (
    check_shared_dimensions,
    concat_batch,
    pad_sequences,
    split_batch,
    stack_arrays,
    to_arrays,
    trim_sequences,
)

__all__ = ["TensorModel"]


class _Prepared(dict[str, np.ndarray]):
    """Input arrays already converted and checked by :meth:`TensorModel.prepare`."""


class TensorModel(Model):
    """A model of named tensors in, named tensors out; subclasses implement :meth:`_run`."""

    _dtypes: dict[str, np.dtype[Any]]
    # Named dimensions several input axes share (see shared_dimensions); none by default.
    _shared_dimensions: Mapping[str, Sequence[tuple[str, int]]] = MappingProxyType({})
    # Inputs the runtime computes (runtime_options.mask_inputs): mask -> (input, dtype).
    _masks: Mapping[str, tuple[str, np.dtype[Any]]] = MappingProxyType({})

    @abstractmethod
    def _run(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the framework on a dict of input arrays (batch on axis 0)."""

    def _check_pad_inputs(self) -> None:
        """Refuse ``runtime_options.pad_inputs`` naming inputs the model does not have."""
        pads = self.settings.runtime_options.get("pad_inputs") or {}
        unknown = sorted(set(pads) - {spec.name for spec in self.inputs})
        if unknown:
            raise ModelLoadError(
                f"runtime_options.pad_inputs names {unknown}, which model "
                f"{self.settings.name!r} does not take; its inputs are "
                f"{[spec.name for spec in self.inputs]}"
            )

    def _take_masks(self) -> None:
        """Make the inputs ``runtime_options.mask_inputs`` names computed, not sent.

        ``{attention_mask: input_ids}``: clients send ``input_ids`` alone and the mask is 1
        over every element they sent (0 where a batch pads, with ``pad_inputs``), so the
        two can never disagree. Call after ``inputs`` and ``_dtypes`` are known.

        Raises:
            ModelLoadError: a name is not an input, or a mask is computed from another mask.
        """
        masks = dict(self.settings.runtime_options.get("mask_inputs") or {})
        names = [spec.name for spec in self.inputs]
        wrong = sorted(
            f"{mask}: {source}"
            for mask, source in masks.items()
            if mask not in names or source not in names or source in masks
        )
        if wrong:
            raise ModelLoadError(
                f"runtime_options.mask_inputs {wrong} of model {self.settings.name!r}: each "
                f"entry is `mask input: the input it masks`, both inputs of {names}, and a "
                "mask is not computed from another mask"
            )
        self._masks = {mask: (source, self._dtypes.pop(mask)) for mask, source in masks.items()}
        self.inputs = tuple(spec for spec in self.inputs if spec.name not in masks)

    def _add_masks(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for mask, (source, dtype) in self._masks.items():
            arrays[mask] = np.ones(arrays[source].shape, dtype=dtype)
        return arrays

    def prepare(self, features: Any) -> dict[str, np.ndarray]:
        """Convert and check one request's tensors before it joins a batch."""
        if type(features) is _Prepared:
            return features
        arrays = to_arrays(self.settings.name, features, self._dtypes, self.inputs)
        self._add_masks(arrays)
        check_shared_dimensions(self.settings.name, arrays, self._shared_dimensions)
        return _Prepared(arrays)

    def prepare_batch(self, batch: Sequence[Any]) -> list[Any]:
        """Convert and check many requests at once: one array per input for all of them.

        Each request gets views into those arrays, as :meth:`prepare` would have made them;
        requests that cannot be converted together are prepared one by one.
        """
        arrays = stack_arrays(self.settings.name, batch, self._dtypes, self.inputs)
        if arrays is not None:
            self._add_masks(arrays)
        if arrays is None or not _dimensions_agree(self, arrays):
            return [self.prepare(features) for features in batch]
        names = list(arrays)
        if len(names) == 1:
            return [_Prepared({names[0]: row}) for row in arrays[names[0]]]
        columns = [arrays[name] for name in names]
        return [_Prepared(zip(names, rows, strict=True)) for rows in zip(*columns, strict=True)]

    def predict(self, features: Any) -> dict[str, np.ndarray]:
        """Run on ``{input name: tensor}``; returns ``{output name: tensor}``."""
        return self._run(self.prepare(features))

    def predict_batch(self, batch: Sequence[Any]) -> list[Any]:
        """One run for the whole batch when shapes allow, else one run per request.

        With ``runtime_options.pad_inputs`` (e.g. ``{input_ids: 0, attention_mask: 0}``),
        sequences of different lengths are padded along axis 1 to the batch's longest, and
        per-token outputs are cut back to each request's own length.

        (``prepare`` returns what it already prepared at once.)
        """
        if not batch:
            return []
        arrays: list[dict[str, np.ndarray]] = [self.prepare(features) for features in batch]
        pads = self.settings.runtime_options.get("pad_inputs")
        padded = pad_sequences(arrays, pads) if pads and len(arrays) > 1 else None
        if padded is not None:
            arrays = padded[0]
        merged = concat_batch(arrays)
        if merged is None:
            return [self._run(a) for a in arrays]
        stacked, sizes = merged
        outputs = split_batch(self._run(stacked), sizes)
        if padded is not None:
            outputs = trim_sequences(outputs, padded[1], padded[2])
        return list(outputs)


def _dimensions_agree(model: TensorModel, stacked: dict[str, np.ndarray]) -> bool:
    """Whether requests stacked on a new axis 0 agree on their shared dimensions."""
    try:
        check_shared_dimensions(model.settings.name, stacked, model._shared_dimensions, offset=1)
    except InvalidInputError:
        return False
    return True
