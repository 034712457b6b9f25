"""What the tabular runtimes share: rows in, ``predict`` and ``predict_proba`` out, batched.

A batch of requests becomes one matrix (their rows stacked) and one call of the estimator;
each request then gets its own rows of the answer back, in the form it asked in:

- ``/infer`` one row: ``{"predict": 1, "predict_proba": {"0": 0.1, "1": 0.9}}``;
- ``/infer`` rows: ``{"predict": [...], "predict_proba": [{"0": ..., "1": ...}, ...]}``;
- v2 tensors: ``predict`` ``[rows]`` and ``predict_proba`` ``[rows, classes]``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from servinglib.errors import ModelLoadError
from servinglib.model import Model, TensorSpec
from servinglib.runtimes._tensors import default_threads
from servinglib.runtimes.tabular._features import FeatureLayout, Rows, layout_from

__all__ = ["PREDICT", "PREDICT_PROBA", "TabularModel"]

PREDICT = "predict"
PREDICT_PROBA = "predict_proba"


class TabularModel(Model):
    """A fitted tabular estimator; subclasses load it and implement :meth:`_run`."""

    layout: FeatureLayout
    classes: tuple[str, ...] = ()  # keys of predict_proba in /infer answers
    class_labels: np.ndarray  # what predict answers for each column of predict_proba
    _outputs: tuple[str, ...] = (PREDICT,)

    @abstractmethod
    def _run(self, matrix: np.ndarray, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        """The ``outputs`` of the estimator for every row of ``matrix``, rows on axis 0."""

    def threads(self) -> int:
        """Threads for one call: ``runtime_options.intra_op_threads``, else cores ÷ workers."""
        option = self.settings.runtime_options.get("intra_op_threads")
        return int(option) if option else default_threads(self.settings.workers)

    def _describe(
        self,
        fitted: Sequence[str] | None,
        count: int,
        *,
        datatype: str,
        nullable: bool,
        classes: Sequence[Any] | None,
        predict_datatype: str,
        proba_datatype: str = "FP64",
    ) -> None:
        """Set inputs, outputs and classes once the estimator is loaded.

        ``classes`` are the labels of ``predict_proba``'s columns (None: no probabilities).

        Raises:
            ModelLoadError: ``inputs:`` or ``runtime_options.outputs`` do not fit the model.
        """
        name = self.settings.name
        self.layout = layout_from(
            name, fitted, count, self.settings.inputs, datatype=datatype, nullable=nullable
        )
        self.inputs = self.layout.specs()
        options = self.settings.runtime_options
        if options.get("classes") is not None:
            given = [str(c) for c in options["classes"]]
            if classes is None or len(given) != len(classes):
                raise ModelLoadError(
                    f"runtime_options.classes of model {name!r} names {len(given)} classes; "
                    f"the model has {'no probabilities' if classes is None else len(classes)}"
                )
            classes = given
            predict_datatype = "BYTES"
        self.class_labels = np.asarray(classes if classes is not None else [], dtype=object)
        if all(type(c) is int for c in self.class_labels):
            self.class_labels = self.class_labels.astype(np.int64)
        self.classes = tuple(str(c) for c in classes) if classes is not None else ()
        available = (PREDICT, PREDICT_PROBA) if classes is not None else (PREDICT,)
        chosen = tuple(options.get("outputs") or available)
        if not chosen or not set(chosen) <= set(available):
            raise ModelLoadError(
                f"runtime_options.outputs of model {name!r} is {list(chosen)}; this model "
                f"offers {list(available)}"
            )
        self._outputs = chosen
        specs = {
            PREDICT: TensorSpec(PREDICT, predict_datatype, (-1,)),
            PREDICT_PROBA: TensorSpec(PREDICT_PROBA, proba_datatype, (-1, len(self.classes))),
        }
        self.outputs = tuple(specs[output] for output in chosen)

    def prepare(self, features: Any) -> Rows:
        """Check one request and turn it into rows (once, before it joins a batch)."""
        if type(features) is Rows:
            return features
        return self.layout.rows(features)

    def predict(self, features: Any) -> dict[str, Any]:
        """Answer one request (one row, rows or v2 tensors)."""
        answer: dict[str, Any] = self.predict_batch([features])[0]
        return answer

    def predict_batch(self, batch: Sequence[Any]) -> list[Any]:
        """One call of the estimator for every row of every request in ``batch``."""
        if not batch:
            return []
        requests = [self.prepare(features) for features in batch]
        matrices = [rows.matrix for rows in requests]
        matrix = matrices[0] if len(matrices) == 1 else np.concatenate(matrices)
        results = self._run(matrix, self._outputs)
        answers = []
        start = 0
        for rows in requests:
            stop = start + len(rows.matrix)
            answers.append(self._answer(results, start, stop, rows))
            start = stop
        return answers

    def _answer(
        self, results: dict[str, np.ndarray], start: int, stop: int, rows: Rows
    ) -> dict[str, Any]:
        if rows.form == "tensors":
            return {name: array[start:stop] for name, array in results.items()}
        answer: dict[str, Any] = {}
        for name, array in results.items():
            values = array[start:stop].tolist()
            if name == PREDICT_PROBA:
                values = [dict(zip(self.classes, row, strict=True)) for row in values]
            answer[name] = values[0] if rows.form == "one" else values
        return answer
