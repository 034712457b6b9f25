"""A version's answers to the rows being profiled: ``predict_batch`` over batches of rows.

Rows are checked against ``input_schema`` and prepared as ``/infer`` does; a row that is
refused, or that makes its batch raise (found by bisecting it), gets no output and one
message, so one bad row costs neither the profile nor its batch neighbours' answers.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema

from servinglib.model import Model
from servinglib.serving.batching import run_isolating

__all__ = ["DEFAULT_BATCH_SIZE", "predict_rows"]

DEFAULT_BATCH_SIZE = 256


def _bar(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit=" rows", unit_scale=True, file=sys.stderr, desc="predicting")


def _refusal(validator: jsonschema.Draft202012Validator | None, row: Any) -> str | None:
    if validator is None:
        return None
    error = jsonschema.exceptions.best_match(validator.iter_errors(row))
    if error is None:
        return None
    where = ".".join(["features", *(str(p) for p in error.absolute_path)])
    return f"invalid input: {where}: {error.message}"


def predict_rows(
    model: Model,
    rows: Sequence[Any],
    refused: Sequence[str | None],
    input_schema: Mapping[str, Any] | None,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool = True,
) -> tuple[list[Any], list[str | None]]:
    """The output of every row (None where it failed) and why each failed row failed.

    ``refused`` holds the messages of rows already refused (unreadable cells).
    """
    validator = jsonschema.Draft202012Validator(input_schema) if input_schema else None
    outputs: list[Any] = [None] * len(rows)
    errors = list(refused)
    payloads: list[tuple[int, Any]] = []
    for i, row in enumerate(rows):
        if errors[i] is None:
            errors[i] = _refusal(validator, row)
        if errors[i] is not None:
            continue
        try:
            payloads.append((i, model.prepare(row)))
        except Exception as e:
            errors[i] = f"invalid input: {e}"
    bar = _bar(len(rows), progress)
    try:
        if bar is not None:
            bar.update(len(rows) - len(payloads))
        for start in range(0, len(payloads), batch_size):
            chunk = payloads[start : start + batch_size]
            answers = run_isolating(model.predict_batch, [p for _, p in chunk])
            for (i, _), (output, error) in zip(chunk, answers, strict=True):
                if error is None:
                    outputs[i] = output
                elif isinstance(error, Exception):
                    errors[i] = f"prediction failed: {type(error).__name__}: {error}"
                else:
                    raise error  # KeyboardInterrupt, SystemExit
            if bar is not None:
                bar.update(len(chunk))
    finally:
        if bar is not None:
            bar.close()
    return outputs, errors
