"""The Ray engine: the same scoring on Ray Data, for inputs one machine cannot score in time.

``ray.data.read_*`` -> ``map_batches`` with an actor class that loads the version and runs
its self-tests once per actor -> ``write_parquet`` / ``write_json``. Each actor scores with
the same :class:`~servinglib.batch._scoring.BatchScorer` and output layout as the local
engine, and Ray Data keeps the input order, so both engines write the same rows.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from servinglib.batch._features import FeatureSpec
from servinglib.batch._layout import OutputLayout
from servinglib.batch._parts import OutputDirectory
from servinglib.batch._source import InputSource
from servinglib.batch._spec import BatchJob, BatchSummary
from servinglib.errors import ConfigError

__all__ = ["run_ray"]


def _import_ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as e:
        raise ConfigError(
            "--engine ray needs Ray Data; install it with pip install 'servinglib[ray]' "
            "(or use --engine local)"
        ) from e
    return ray


class _ScoringActor:
    """One Ray actor: loads the version (self-tests first) once, then scores batches."""

    def __init__(self, job: BatchJob, version: str, layout: dict[str, Any]) -> None:
        from servinglib.batch._loading import load_scorer
        from servinglib.monitoring.logs import configure_logging

        configure_logging("error")
        features = FeatureSpec(job.id_column, job.features_column)
        self._scorer = load_scorer(
            job.config, job.model, version, job.workers, features, OutputLayout.from_dict(layout)
        )

    def __call__(self, table: pa.Table) -> pa.Table:
        parts = [self._scorer.score(batch) for batch in table.to_batches() if batch.num_rows]
        if not parts:
            return self._scorer.layout.schema().empty_table()
        return pa.concat_tables(parts)


def run_ray(
    job: BatchJob,
    source: InputSource,
    layout: OutputLayout,
    batch_size: int,
    version: str,
    out: OutputDirectory,
) -> BatchSummary:
    """Score ``source`` on a Ray cluster (``job.address``, or a new local one)."""
    ray = _import_ray()
    started = time.monotonic()
    # A new local cluster gets one CPU for reading and writing beyond the actors, which
    # would otherwise hold every CPU of a small machine while read tasks wait for one.
    local_cpus = max(os.cpu_count() or 1, math.ceil(job.workers * job.cpus_per_worker) + 1)
    ray.init(
        address=job.address,
        num_cpus=None if job.address else local_cpus,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        ignore_reinit_error=True,
    )
    try:
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True
        context.enable_progress_bars = job.progress
        files = list(source.files)
        if source.format == "parquet":
            dataset = ray.data.read_parquet(files)
        elif source.format == "csv":
            dataset = ray.data.read_csv(files)
        else:
            dataset = ray.data.read_json(files, lines=True)
        scored = dataset.map_batches(
            _ScoringActor,
            fn_constructor_kwargs={"job": job, "version": version, "layout": layout.to_dict()},
            batch_size=batch_size,
            batch_format="pyarrow",
            concurrency=job.workers,
            num_cpus=job.cpus_per_worker,
        )
        scoring_started = time.monotonic()
        if out.format == "parquet":
            scored.write_parquet(str(out.path), filename_provider=_part_names("parquet"))
        else:
            scored.write_json(str(out.path), filename_provider=_part_names("jsonl"))
        finished = time.monotonic()
    finally:
        ray.shutdown()
    written = sorted(p for p in out.path.iterdir() if not p.name.startswith(("_", ".")))
    table = (
        ds.dataset([str(p) for p in written], format="parquet").to_table(columns=["error"])
        if out.format == "parquet"
        else None
    )
    rows, errors = _count(written, table)
    return BatchSummary(
        model=job.model,
        version=version,
        engine="ray",
        rows=rows,
        errors=errors,
        seconds=finished - started,
        output=out.path,
        files=[Path(p) for p in written],
        startup_s=scoring_started - started,
    )


def _count(written: list[Path], table: pa.Table | None) -> tuple[int, int]:
    if table is not None:
        return len(table), len(table) - table.column("error").null_count
    import json

    rows = errors = 0
    for path in written:
        with path.open("rb") as lines:
            for line in lines:
                rows += 1
                errors += json.loads(line).get("error") is not None
    return rows, errors


def _part_names(extension: str) -> Any:
    """Ray Data file names that sort in output order: ``part-<task>-<block>.<ext>``."""
    from ray.data.datasource import FilenameProvider

    class PartNames(FilenameProvider):
        def get_filename_for_block(
            self, block: Any, write_uuid: str, task_index: int, block_index: int
        ) -> str:
            return f"part-{task_index:06d}-{block_index:06d}.{extension}"

    return PartNames()
