"""The input side of a batch job: the columns read, checked before the model loads, and
the first rows scored first, so a job whose every row fails stops at once with the causes.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from servinglib.batch._scoring import BatchScorer
from servinglib.batch._source import InputSource
from servinglib.batch._spec import BatchAbortedError, BatchJob
from servinglib.errors import ConfigError
from servinglib.tabular import READ_ERROR, ColumnPlan, InputFileError, header_columns, plan_columns
from servinglib.tabular.reader import DROPPED_KEY

__all__ = ["PROBE_ROWS", "first_rows", "plan_input", "score_first_rows"]

PROBE_ROWS = 256  # rows scored before the job starts writing
_CAUSES = 3  # distinct causes printed when every first row fails


def warn(message: str) -> None:
    """One warning line on stderr (the job goes on)."""
    print(f"warning: {message}", file=sys.stderr)


def plan_input(
    job: BatchJob, source: InputSource, input_schema: Mapping[str, Any] | None
) -> InputSource:
    """``source`` with the columns to read, from the first file's header and the schema.

    Every other file must hold the same feature columns. Columns left out are named in a
    warning.

    Raises:
        ConfigError: a required feature, a ``--columns`` column or the id column is missing
            in some file; InputFileError: a file's header cannot be read.
    """
    plan: ColumnPlan | None = None
    dropped: dict[str, None] = {}
    for path in source.files:
        this = plan_columns(
            header_columns(path, source.format),
            input_schema,
            source=path,
            model=job.model,
            id_column=job.id_column,
            chosen=job.columns,
            text_column=job.features_column,
        )
        dropped.update(dict.fromkeys(this.dropped))
        if plan is None:
            plan = this
        elif this.features is not None and plan.features is not None:
            missing = [c for c in plan.features if c not in this.features]
            if missing:
                raise ConfigError(
                    f"{path} has no column {missing[0]!r}, which {source.files[0]} has; give "
                    "files with the same feature columns, or choose them with --columns"
                )
    assert plan is not None
    if dropped and job.columns is None:
        warn(
            f"columns {list(dropped)} are not features of model {job.model!r} (its "
            "input_schema does not declare them): left out; choose columns with --columns"
        )
    return dataclasses.replace(source, plan=dataclasses.replace(plan, dropped=tuple(dropped)))


def first_rows(source: InputSource, rows: int = PROBE_ROWS) -> pa.RecordBatch | None:
    """The first ``rows`` rows of the input, read as the job reads them (None: no rows)."""
    for unit in source.units:
        for batch in source.batches(unit, rows):
            dropped = (batch.schema.metadata or {}).get(DROPPED_KEY)
            if dropped and source.plan.features is not None:
                warn(
                    f"keys {dropped.decode().split(',')} of {unit.path} are not declared "
                    "features of the model: left out"
                )
            _refuse_unreadable(batch, unit.path)
            return batch
    return None


def _refuse_unreadable(batch: pa.RecordBatch, path: str) -> None:
    """A file none of whose first lines is a JSON object is not JSON Lines: refuse it whole."""
    errors = batch.column(READ_ERROR)
    if errors.null_count or not batch.num_rows:
        return
    first = errors[0].as_py()
    if all(" of " in e and ("valid JSON" in e or "not an object" in e) for e in errors.to_pylist()):
        raise InputFileError(
            f"{path}: cannot read it as JSON Lines (none of its first {batch.num_rows} lines "
            f"is a JSON object; {first.removeprefix('invalid input: ')}); fix the file, or "
            "pass --input-format if it is of another format"
        )


def _scored(scorer: BatchScorer, batch: pa.RecordBatch) -> Any:
    try:
        return scorer.score(batch)
    except BaseException as e:  # handed to the waiting thread, which raises it
        return e


def score_first_rows(
    scorer: BatchScorer, batch: pa.RecordBatch, where: str, timeout_s: float = 0.0
) -> None:
    """Score ``batch``; when every row fails, stop the job with the first distinct causes.

    With ``timeout_s`` (the job's call timeout), rows that do not answer in time are left to
    the worker processes, whose every call is timed: this check never hangs a job.

    Raises:
        BatchAbortedError: naming the causes, before anything is written.
    """
    if timeout_s > 0:
        outcome: list[Any] = []
        thread = threading.Thread(
            target=lambda: outcome.append(_scored(scorer, batch)),
            name="servinglib-first-rows",
            daemon=True,  # a model that never returns must not keep the job alive
        )
        thread.start()
        thread.join(timeout_s)
        if not outcome:
            print(
                f"warning: the first {batch.num_rows} rows of {where} did not answer within "
                f"--call-timeout-s {timeout_s:g} s; the workers score them, each call timed",
                file=sys.stderr,
            )
            return
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        table = outcome[0]
    else:
        table = scorer.score(batch)
    errors = table.column("error").to_pylist()
    if any(e is None for e in errors):
        return
    causes: dict[str, int] = {}
    for row, error in enumerate(errors):
        if error not in causes:
            causes[error] = row + 1
        if len(causes) == _CAUSES:
            break
    lines = "\n".join(f"  row {row}: {error}" for error, row in causes.items())
    raise BatchAbortedError(
        f"all of the first {len(errors)} rows of {where} failed, so nothing was scored or "
        f"written; the first causes:\n{lines}\nfix the input (or the model) and rerun"
    )
