"""What a batch job is: every option of ``servinglib batch-predict`` in one value."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from servinglib.errors import ServinglibError

__all__ = ["BatchAbortedError", "BatchJob", "BatchSummary"]


class BatchAbortedError(ServinglibError):
    """A batch job stopped: too many error rows, or a worker process died."""


@dataclass(frozen=True)
class BatchJob:
    """Options of one batch job (see ``servinglib batch-predict --help``).

    Attributes:
        config: the servinglib.yaml file.
        model: the model to score with.
        input: a file, a directory or a glob of Parquet, CSV or JSON Lines files.
        output: the output directory (parts and ``_manifest.json``).
        version: the version; the default version when None.
        input_format: parquet, csv or json; guessed from the file suffixes when None.
        output_format: parquet or jsonl.
        id_column: an input column carried to the output, not passed as a feature.
        features_column: a column holding each row's features as JSON text.
        columns: the feature columns; None: those ``input_schema`` declares (others are
            left out with a warning), or every column when it declares none.
        numpy_lists: numeric list columns reach the model as NumPy arrays, not lists.
        batch_size: rows per ``predict_batch``; ``batching.max_batch_size`` when None.
        workers: worker processes (local) or actors (Ray), each loading the model once.
        max_error_rate: the share of error rows beyond which the job stops.
        engine: local or ray.
        address: the Ray cluster (``auto``, ``ray://host:10001``, ``host:6379``); a new
            local cluster when None.
        cpus_per_worker: CPUs Ray reserves for each actor.
        call_timeout_s: seconds one ``predict_batch`` call may run before its worker is
            replaced and its rows become error rows (local engine); None: 3 x the model's
            ``deadline_ms``, at least 30 s; 0: no limit.
        resume: finish the job already started in ``output``.
        overwrite: replace what ``output`` holds.
        progress: draw a progress bar on stderr.
    """

    config: str
    model: str
    input: str
    output: str
    version: str | None = None
    input_format: str | None = None
    output_format: str = "parquet"
    id_column: str | None = None
    features_column: str | None = None
    columns: tuple[str, ...] | None = None
    numpy_lists: bool = False
    batch_size: int | None = None
    workers: int = 1
    max_error_rate: float = 0.01
    engine: str = "local"
    address: str | None = None
    cpus_per_worker: float = 1.0
    call_timeout_s: float | None = None
    resume: bool = False
    overwrite: bool = False
    progress: bool = True


@dataclass
class BatchSummary:
    """What a finished job did."""

    model: str
    version: str
    engine: str
    rows: int
    errors: int
    seconds: float
    output: Path
    files: list[Path] = field(default_factory=list)
    resumed_rows: int = 0
    startup_s: float = 0.0  # local: workers loaded; Ray: cluster up to the first part written

    @property
    def rows_per_s(self) -> float:
        """Rows scored by this run per second of scoring (resumed rows and start-up excluded)."""
        return (self.rows - self.resumed_rows) / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        """A few lines for the end of the command's output."""
        share = 100.0 * self.errors / self.rows if self.rows else 0.0
        lines = [
            f"{self.model} {self.version} ({self.engine} engine): {self.rows:,} rows, "
            f"{self.errors:,} errors ({share:.2f} %), {self.rows_per_s:,.0f} rows/s "
            f"over {self.seconds:.1f} s",
            f"output: {self.output} ({len(self.files)} file(s))",
        ]
        if self.resumed_rows:
            lines.insert(1, f"resumed: {self.resumed_rows:,} rows were already written")
        if self.startup_s:
            lines.insert(1, f"start-up: {self.startup_s:.1f} s")
        return "\n".join(lines)
