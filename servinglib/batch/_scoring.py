"""Score one record batch with a loaded model version: validate, prepare, predict, lay out.

The same steps as ``/infer`` for every row: the input rules of the JSON layer, the
``input_schema``, ``Model.prepare`` and then one ``predict_batch`` for the rows that passed.
Validation, conversion and output layout run on whole chunks of rows (vectorised where
they can), ``predict_batch`` on slices of ``batch_size`` of them: the fixed cost of a chunk
is spread over many model batches. A batch that raises is bisected
(:func:`servinglib.serving.batching.run_isolating`), so one poison row fails alone, as it does in
the online batcher.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from servinglib.batch._calls import CallGuard
from servinglib.batch._features import FeatureSpec, rows_to_features
from servinglib.batch._layout import OutputLayout
from servinglib.batch._validation import BatchValidator
from servinglib.errors import InvalidInputError
from servinglib.model import Model
from servinglib.serving.isolation import one_per_input, run_isolating

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
    guard: CallGuard = field(default_factory=CallGuard)  # publishes calls to a parent

    def __post_init__(self) -> None:
        self._validator = BatchValidator(self.input_schema)
        # the base class's prepare returns its input: calling it per row buys nothing
        self._prepares = type(self.model).prepare is not Model.prepare
        # the base class's prepare_batch calls prepare per row, and would do it twice for
        # a chunk holding one bad row: only a model's own prepare_batch is worth a try
        self._prepares_batch = type(self.model).prepare_batch is not Model.prepare_batch

    def score(self, batch: pa.RecordBatch) -> pa.Table:
        """The output rows of ``batch``, in input order, one per input row."""
        rows = rows_to_features(batch, self.features)
        errors = self._validator.errors(rows.features, rows.columns, rows.errors)
        for i, message in self.guard.preset(batch.num_rows):
            errors[i] = errors[i] or message  # its call hung: it reaches the model no more
        payloads, positions = self._payloads(rows.features, errors)
        outputs: list[Any] = [None] * batch.num_rows
        for start, stop in self.guard.slices(positions, self.batch_size):
            chunk = payloads[start:stop]
            where = positions[start:stop]
            results = self._predict(chunk, where)
            if isinstance(results, Exception):
                isolated = self._isolate(chunk, results, where)
                for i, (output, error) in zip(where, isolated, strict=True):
                    if error is not None:
                        if not isinstance(error, Exception):
                            raise error  # KeyboardInterrupt, SystemExit: stop the job
                        errors[i] = describe_error(error)
                    else:
                        outputs[i] = output
            elif isinstance(where, range):
                outputs[where.start : where.stop] = results  # every row of the slice answered
            else:
                for i, output in zip(where, results, strict=True):
                    outputs[i] = output
        ids = batch.column(self.features.id_column) if self.features.id_column else None
        return self.layout.table(ids, outputs, errors, self.model_name, self.version)

    def _payloads(
        self, features: list[Any], errors: list[str | None]
    ) -> tuple[list[Any], Sequence[int]]:
        """What ``predict_batch`` receives for the rows still valid, and their positions."""
        if not self._prepares:
            if errors.count(None) == len(errors):
                return features, range(len(features))  # the common case: no copies
            positions = [i for i, e in enumerate(errors) if e is None]
            return [features[i] for i in positions], positions
        if self._prepares_batch:
            prepared = self._prepare_together(features, errors)
            if prepared is not None:
                return prepared
        payloads: list[Any] = []
        kept: list[int] = []
        for i, row in enumerate(features):
            if errors[i] is not None:
                continue
            try:
                payloads.append(self.model.prepare(row))
            except Exception as e:
                errors[i] = describe_error(e)
                continue
            kept.append(i)
        return payloads, kept

    def _prepare_together(
        self, features: list[Any], errors: list[str | None]
    ) -> tuple[list[Any], list[int]] | None:
        """The model's ``prepare_batch`` over the valid rows; None when it raised."""
        positions = [i for i, e in enumerate(errors) if e is None]
        valid = features if len(positions) == len(features) else [features[i] for i in positions]
        try:
            prepared = self.model.prepare_batch(valid)
        except Exception:
            return None  # the caller prepares row by row, so a bad row fails alone
        return (prepared, positions) if len(prepared) == len(valid) else None

    def _predict(self, payloads: list[Any], where: Sequence[int]) -> list[Any] | Exception:
        """One ``predict_batch`` over ``payloads`` (rows ``where``): outputs, or what it raised."""
        try:
            results = one_per_input(
                self.guard.call(self.model.predict_batch, payloads, where), payloads
            )
        except Exception as e:
            return e
        return list(results)

    def _isolate(
        self, payloads: list[Any], error: Exception, where: Sequence[int]
    ) -> list[tuple[Any, BaseException | None]]:
        """After ``payloads`` failed as one batch: bisect it so only the poison rows fail."""
        if len(payloads) == 1:
            return [(None, error)]
        middle = len(payloads) // 2
        predict = self.guard.wrap(self.model.predict_batch, where)
        return run_isolating(predict, payloads[:middle]) + run_isolating(predict, payloads[middle:])
