"""Score one record batch with a loaded model version: validate, prepare, predict, lay out.

The same steps as ``/infer`` for every row: the input rules of the JSON layer, the
``input_schema``, ``Model.prepare`` and then one ``predict_batch`` for the rows that passed.
Validation, conversion and output layout run on whole chunks of rows (vectorised where
they can), ``predict_batch`` on slices of ``batch_size`` of them: the fixed cost of a chunk
is spread over many model batches. A batch that raises is bisected
(:func:`servinglib.batching.run_isolating`), so one poison row fails alone, as it does in
the online batcher.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from servinglib.batch._features import FeatureSpec, rows_to_features
from servinglib.batch._layout import OutputLayout
from servinglib.batch._validation import BatchValidator
from servinglib.batching import run_isolating
from servinglib.errors import InvalidInputError
from servinglib.model import Model

__all__ = ["BatchScorer", "describe_error"]


def describe_error(error: BaseException) -> str:
    """The text of a row's ``error`` column for what ``prepare`` or ``predict`` raised."""
    if isinstance(error, InvalidInputError):
        return f"invalid input: {error}"
    return f"prediction failed: {type(error).__name__}: {error}"


@dataclass
class BatchScorer:
    """Turns input record batches into output tables for one loaded model version."""

    model: Model
    model_name: str
    version: str
    features: FeatureSpec
    layout: OutputLayout
    input_schema: Mapping[str, Any] | None
    batch_size: int = 256

    def __post_init__(self) -> None:
        self._validator = BatchValidator(self.input_schema)
        # the base class's prepare returns its input: calling it per row buys nothing
        self._prepares = type(self.model).prepare is not Model.prepare

    def score(self, batch: pa.RecordBatch) -> pa.Table:
        """The output rows of ``batch``, in input order, one per input row."""
        rows = rows_to_features(batch, self.features)
        errors = self._validator.errors(rows.features, rows.columns, rows.errors)
        payloads: list[Any] = []
        positions: list[int] = []
        for i, features in enumerate(rows.features):
            if errors[i] is not None:
                continue
            try:
                payloads.append(self.model.prepare(features) if self._prepares else features)
            except Exception as e:
                errors[i] = describe_error(e)
                continue
            positions.append(i)
        outputs: list[Any] = [None] * batch.num_rows
        for start in range(0, len(payloads), self.batch_size):
            results = run_isolating(
                self.model.predict_batch, payloads[start : start + self.batch_size]
            )
            for i, (output, error) in zip(
                positions[start : start + self.batch_size], results, strict=True
            ):
                if error is not None:
                    if not isinstance(error, Exception):
                        raise error  # KeyboardInterrupt, SystemExit: stop the job
                    errors[i] = describe_error(error)
                else:
                    outputs[i] = output
        ids = batch.column(self.features.id_column) if self.features.id_column else None
        return self.layout.table(ids, outputs, errors, self.model_name, self.version)
