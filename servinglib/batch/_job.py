"""Run a batch job: check the options, load and self-test the version, score, summarise."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from servinglib.batch._features import FeatureSpec, check_input_schema
from servinglib.batch._input import first_rows, plan_input, score_first_rows
from servinglib.batch._layout import OutputLayout
from servinglib.batch._loading import (
    DEFAULT_BATCH_SIZE,
    first_selftest_output,
    load_version,
    release_version,
    scorer_for,
)
from servinglib.batch._local import WorkerSpec, in_process, run_local
from servinglib.batch._manifest import input_identity
from servinglib.batch._overlap import check_no_overlap
from servinglib.batch._parts import OutputDirectory, PartStats
from servinglib.batch._progress import Progress
from servinglib.batch._source import InputSource, open_input
from servinglib.batch._spec import BatchAbortedError, BatchJob, BatchSummary
from servinglib.config.spec import ServiceConfig, load_config
from servinglib.errors import ConfigError
from servinglib.lifecycle.registry import VersionRecord

__all__ = ["BatchSummary", "predict"]

_MIN_ROWS_TO_JUDGE = 1000  # the error rate is judged mid-run only past this many rows
# a batch call holds many rows, so it may take a few request deadlines; never under 30 s
CALL_TIMEOUT_DEADLINES, MIN_CALL_TIMEOUT_S = 3, 30.0
MAX_WORKERS = 256
MAX_BATCH_SIZE = 65536


def _check_options(job: BatchJob) -> None:
    problems = []
    if job.engine not in ("local", "ray"):
        problems.append(f"--engine {job.engine!r}: use local or ray")
    if not 1 <= job.workers <= MAX_WORKERS:  # each worker loads the model once more
        problems.append(f"--workers {job.workers}: use 1 to {MAX_WORKERS} (the limit)")
    if job.batch_size is not None and not 1 <= job.batch_size <= MAX_BATCH_SIZE:
        problems.append(
            f"--batch-size {job.batch_size}: use 1 to {MAX_BATCH_SIZE} (the limit: a batch's "
            "rows, features and outputs are held in memory at once)"
        )
    if not 0.0 <= job.max_error_rate <= 1.0:
        problems.append(f"--max-error-rate {job.max_error_rate}: use a share from 0 to 1")
    if job.call_timeout_s is not None and not job.call_timeout_s >= 0:
        problems.append(f"--call-timeout-s {job.call_timeout_s}: use seconds, or 0 for no limit")
    if job.resume and job.overwrite:
        problems.append("--resume and --overwrite exclude each other")
    if problems:
        raise ConfigError("; ".join(problems))


def _input_schema(job: BatchJob) -> Mapping[str, Any] | None:
    """The model's ``input_schema``, read before the model loads (None: no such model yet)."""
    config = load_config(job.config)
    model = next((m for m in config.models if m.name == job.model), None)
    return model.input_schema if model is not None else None


def _features(job: BatchJob, source: InputSource) -> FeatureSpec:
    plan = source.plan
    return FeatureSpec(
        job.id_column,
        job.features_column,
        numpy_lists=job.numpy_lists,
        absent_if_null=frozenset(plan.schemas) - plan.nullable,
    )


def _layout(
    job: BatchJob, source: InputSource, record: VersionRecord, first: pa.RecordBatch | None
) -> OutputLayout:
    schema = first.schema if first is not None else pa.schema([])
    check_input_schema(schema, _features(job, source), job.input)
    id_type = None
    if job.id_column and first is not None:
        id_type = str(schema.field(job.id_column).type)
    example = first_selftest_output(record)
    return OutputLayout.from_example(example, job.id_column, id_type)


def _batch_size(job: BatchJob, config: ServiceConfig) -> int:
    if job.batch_size is not None:
        return job.batch_size
    model = next(m for m in config.models if m.name == job.model)
    return model.batching.max_batch_size if model.batching else DEFAULT_BATCH_SIZE


def call_timeout_s(job: BatchJob, config: ServiceConfig) -> float:
    """``job.call_timeout_s``, or by default 3 x the model's ``deadline_ms``, at least 30 s."""
    if job.call_timeout_s is not None:
        return job.call_timeout_s
    model = next(m for m in config.models if m.name == job.model)
    return max(MIN_CALL_TIMEOUT_S, CALL_TIMEOUT_DEADLINES * model.deadline_ms / 1000)


def _judge(job: BatchJob, rows: int, errors: int, *, final: bool) -> None:
    if (final or rows >= _MIN_ROWS_TO_JUDGE) and errors > job.max_error_rate * rows:
        raise BatchAbortedError(
            f"{errors:,} of {rows:,} rows failed, more than --max-error-rate "
            f"{job.max_error_rate:g}; the error column of the parts in {job.output} says "
            "why (fix the causes, or raise --max-error-rate and rerun with --resume)"
        )


def predict(job: BatchJob) -> BatchSummary:
    """Score ``job.input`` with one model version into ``job.output``.

    Example::

        summary = predict(BatchJob("servinglib.yaml", "eta", "rides/", "scores/", workers=2))
        print(summary.describe())

    Raises:
        ModelNotReadyError: the version failed to load or a self-test failed; nothing scored.
        ConfigError: bad options, input or output directory.
        BatchAbortedError: too many error rows, or a worker failed.
    """
    _check_options(job)
    check_no_overlap(job.input, job.output)
    # the columns input_schema implies: a missing one is refused before the model loads
    source = plan_input(job, open_input(job.input, job.input_format), _input_schema(job))
    out = OutputDirectory(job.output, job.output_format)
    out.lock()  # before loading the model: a busy output is refused at once
    try:
        return _predict(job, source, out)
    finally:
        out.close()


def _predict(job: BatchJob, source: InputSource, out: OutputDirectory) -> BatchSummary:
    first = first_rows(source)
    config, record = load_version(job.config, job.model, job.version, job.workers)
    layout = _layout(job, source, record, first)
    batch_size = _batch_size(job, config)
    if first is not None and job.max_error_rate < 1.0:  # 1: write every error row, never stop
        scorer = scorer_for(config, record, _features(job, source), layout, batch_size)
        timeout_s = call_timeout_s(job, config) if job.engine == "local" else 0.0
        score_first_rows(scorer, first, source.units[0].path, timeout_s)
    description: dict[str, Any] = {
        "model": record.model,
        "version": record.version,
        "input": input_identity(source.files),
        "input_format": source.format,
        "output_format": "jsonl" if job.output_format == "jsonl" else "parquet",
        "id_column": job.id_column,
        "features_column": job.features_column,
        "columns": list(source.plan.features) if source.plan.features is not None else None,
        "numpy_lists": job.numpy_lists,
        "batch_size": batch_size,
        "layout": layout.to_dict(),
    }
    out.start(description, len(source.units), resume=job.resume, overwrite=job.overwrite)
    try:
        summary = _run(job, source, config, record, layout, batch_size, out)
        final = {
            "engine": summary.engine,
            "rows": summary.rows,
            "errors": summary.errors,
            "files": [f.name for f in summary.files],
        }
        _judge(job, summary.rows, summary.errors, final=True)
    except BatchAbortedError as e:
        out.finish({"failed": str(e)}, complete=False)  # parts kept for --resume
        raise
    out.finish(final, complete=True)
    return summary


def _run(
    job: BatchJob,
    source: InputSource,
    config: ServiceConfig,
    record: VersionRecord,
    layout: OutputLayout,
    batch_size: int,
    out: OutputDirectory,
) -> BatchSummary:
    done: dict[int, PartStats] = {}
    for unit in source.units:
        stats = out.done(unit.index)
        if stats is not None and unit.rows in (None, stats.rows):
            done[unit.index] = stats
    initial = (sum(s.rows for s in done.values()), sum(s.errors for s in done.values()))
    pending = [unit for unit in source.units if unit.index not in done]
    features = _features(job, source)
    timeout_s = call_timeout_s(job, config) if job.engine == "local" else 0.0
    scorer = (
        scorer_for(config, record, features, layout, batch_size)
        if in_process(job.workers, len(pending), timeout_s)
        else None
    )
    if scorer is None and job.engine == "local":
        release_version(record)  # worker processes score, each with a version of its own
    spec = WorkerSpec(
        job.config,
        job.model,
        record.version,
        job.workers,
        features,
        layout,
        source,
        out,
        batch_size,
        timeout_s,
    )
    progress = Progress(source.total_rows, enabled=job.progress, initial=initial)

    def advance(rows: int, errors: int) -> None:
        progress.update(rows, errors)
        _judge(job, progress.rows, progress.errors, final=False)

    started = time.monotonic()
    startup_s = 0.0
    try:
        if job.engine == "ray":
            from servinglib.batch._ray import run_ray

            startup_s = run_ray(
                spec,
                pending,
                advance,
                address=job.address,
                cpus_per_worker=job.cpus_per_worker,
                show_progress=job.progress,
            )
        else:
            startup_s = run_local(spec, pending, scorer, advance)
    finally:
        progress.close()
    return BatchSummary(
        model=record.model,
        version=record.version,
        engine=job.engine,
        rows=progress.rows,
        errors=progress.errors,
        # local workers report when they are loaded; Ray's start-up ends with its first part
        seconds=time.monotonic() - started - (startup_s if job.engine == "local" else 0.0),
        output=out.path,
        files=[out.part_path(unit.index) for unit in source.units],
        resumed_rows=initial[0],
        startup_s=startup_s,
    )
