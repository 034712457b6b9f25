"""The local engine: work units scored in worker processes, each model call timed.

Each worker process (spawned, not forked: ONNX Runtime and torch are not fork-safe) loads
the version and runs its self-tests once, then scores the whole work units its parent
hands it and writes their parts itself; the parent hands out units, counts progress,
records each part in the manifest and times every model call (:mod:`._calls`). A call
that runs past ``--call-timeout-s`` gets its worker killed and replaced, as the server's
watchdog retires a wedged worker: the fresh worker scores that worker's units again, the
rows of the hung call one at a time, and a row that hangs alone as an error row. When
calls keep hanging with none answered in between, the job stops. With
``--call-timeout-s 0`` and one worker the job scores in the calling process, on the version
it already loaded. A worker whose parent died stops at its next batch (or at once, where
the kernel can signal it). Workers overlap reading and writing with scoring only while a
core is left over (:func:`overlaps_io`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servinglib.batch._calls import CallGuard
from servinglib.batch._features import FeatureSpec
from servinglib.batch._layout import OutputLayout
from servinglib.batch._parts import OutputDirectory
from servinglib.batch._pipeline import ProgressCallback, UnitFailedError, score_units
from servinglib.batch._pool import WorkerPool
from servinglib.batch._scoring import BatchScorer
from servinglib.batch._source import InputSource, WorkUnit
from servinglib.batch._spec import BatchAbortedError

__all__ = ["WorkerSpec", "in_process", "overlaps_io", "run_local"]


def overlaps_io(workers: int) -> bool:
    """Whether a worker should read and write in threads beside its scoring thread.

    Only while a core is left over beyond the workers: there the decoding and encoding run
    beside the model. When the workers occupy every core, the stages would only take turns
    on it and the hand-offs between threads cost CPU (the GIL passing back and forth), so
    each worker reads, scores and writes in turn.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return workers < (cores or 1)


def in_process(workers: int, units: int, call_timeout_s: float) -> bool:
    """Whether the job scores in the calling process: one worker and no call timeout."""
    return call_timeout_s <= 0 and (workers <= 1 or units <= 1)


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker process needs to load the version and score units (picklable)."""

    config: str
    model: str
    version: str
    workers: int
    features: FeatureSpec
    layout: OutputLayout
    source: InputSource
    out: OutputDirectory
    batch_size: int
    call_timeout_s: float = 0.0

    def load_scorer(self) -> BatchScorer:
        """In a worker process or actor: quiet logs, load and self-test, wrap for scoring."""
        from servinglib.batch._loading import load_scorer
        from servinglib.monitoring.logs import configure_logging

        configure_logging("error")
        return load_scorer(
            self.config,
            self.model,
            self.version,
            self.workers,
            self.features,
            self.layout,
            self.batch_size,
        )


def _die_with_parent() -> None:
    """Have the kernel kill this process when its parent dies (Linux), hung or not."""
    with contextlib.suppress(Exception):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def worker_main(spec: WorkerSpec, worker: int, slot: Any, tasks: Any, results: Any) -> None:
    """Body of one worker process: load once, then score the units it is handed."""
    _die_with_parent()
    parent = os.getppid()
    sending = threading.Lock()  # the scoring and writing threads both report

    def send(*message: Any) -> None:
        with sending:
            results.send((message[0], worker, *message[1:]))

    try:
        scorer = spec.load_scorer()
    except Exception as e:
        send("failed", f"worker {os.getpid()} could not load the model: {e}")
        return
    guard = CallGuard(slot, spec.call_timeout_s)
    scorer.guard = guard

    def progress(rows: int, errors: int) -> None:
        if os.getppid() != parent:  # the job was killed: leave the rest to --resume
            os._exit(1)
        send("progress", guard.unit, rows, errors)

    def units() -> Any:
        # the read stage asks for the next unit once it has read the last one
        while True:
            try:
                task = tasks.recv()
            except EOFError:  # the parent is gone
                return
            if task is None:
                return
            index, hung, suspect = task
            guard.hung[index], guard.suspect[index] = frozenset(hung), frozenset(suspect)
            yield spec.source.units[index]

    send("ready")
    try:
        score_units(
            spec.source,
            units(),
            scorer,
            spec.out,
            spec.batch_size,
            progress,
            lambda unit, stats: send("done", unit.index, stats),
            overlap=overlaps_io(spec.workers),
        )
    except Exception as e:
        where = "" if isinstance(e, UnitFailedError) else f"worker {os.getpid()}: "
        send("failed", f"{where}{e}")


def run_local(
    spec: WorkerSpec,
    pending: Sequence[WorkUnit],
    scorer: BatchScorer | None,
    progress: ProgressCallback,
) -> float:
    """Score ``pending`` units in this process (:func:`in_process`) or in worker processes.

    Returns:
        Seconds until every worker process had loaded and self-tested the version (0 when
        scoring in this process): the start-up cost, apart from scoring.

    Raises:
        BatchAbortedError: a worker failed or died, or model calls keep hanging; parts
            already written are kept.
    """
    if not pending:
        return 0.0
    if scorer is not None and in_process(spec.workers, len(pending), spec.call_timeout_s):
        try:
            score_units(
                spec.source,
                pending,
                scorer,
                spec.out,
                spec.batch_size,
                progress,
                lambda unit, stats: spec.out.record(unit.index, stats),
                overlap=overlaps_io(1),
            )
        except UnitFailedError as e:
            raise BatchAbortedError(f"{e}; rerun with --resume once fixed") from e.__cause__
        return 0.0
    context = multiprocessing.get_context("spawn")
    pool = WorkerPool(context, spec, worker_main, progress)
    return pool.run(pending)
