"""The local engine: work units scored in this process or in N spawned worker processes.

With one worker the job runs in the calling process, on the version it already loaded and
self-tested. With more, each worker process (spawned, not forked: ONNX Runtime and torch
are not fork-safe) loads the version and runs its self-tests once, then takes whole work
units from a queue and writes their parts itself; the parent only hands out units and
counts progress. A worker whose parent died (SIGKILL) stops at its next batch. Workers
overlap reading and writing with scoring only while a core is left over
(:func:`overlaps_io`).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servinglib.batch._features import FeatureSpec
from servinglib.batch._layout import OutputLayout
from servinglib.batch._parts import OutputDirectory
from servinglib.batch._pipeline import ProgressCallback, UnitFailedError, score_units
from servinglib.batch._scoring import BatchScorer
from servinglib.batch._source import InputSource, WorkUnit
from servinglib.batch._spec import BatchAbortedError

__all__ = ["WorkerSpec", "overlaps_io", "run_local"]


def overlaps_io(workers: int) -> bool:
    """Whether a worker should read and write in threads beside its scoring thread.

    Only while a core is left over beyond the workers: there the decoding and encoding run
    beside the model. When the workers occupy every core, the stages would only take turns
    on it and the hand-offs between threads cost CPU (the GIL passing back and forth), so
    each worker reads, scores and writes in turn.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return workers < (cores or 1)


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


def _worker(spec: WorkerSpec, tasks: Any, results: Any) -> None:
    """Body of one worker process: load once, then score units until told to stop."""
    parent = os.getppid()
    try:
        scorer = spec.load_scorer()
    except Exception as e:
        results.put(("failed", f"worker {os.getpid()} could not load the model: {e}"))
        return

    def progress(rows: int, errors: int) -> None:
        if os.getppid() != parent:  # the job was killed: leave the rest to --resume
            os._exit(1)
        results.put(("progress", rows, errors))

    results.put(("ready",))
    # the read stage takes the next unit from the queue once it has read the last one
    units = (spec.source.units[index] for index in iter(tasks.get, None))
    try:
        score_units(
            spec.source,
            units,
            scorer,
            spec.out,
            spec.batch_size,
            progress,
            lambda unit, stats: results.put(("done", unit.index, stats)),
            overlap=overlaps_io(spec.workers),
        )
    except Exception as e:
        where = "" if isinstance(e, UnitFailedError) else f"worker {os.getpid()}: "
        results.put(("failed", f"{where}{e}"))


def run_local(
    spec: WorkerSpec,
    pending: Sequence[WorkUnit],
    scorer: BatchScorer,
    progress: ProgressCallback,
) -> float:
    """Score ``pending`` units: in-process with one worker, else in ``spec.workers`` processes.

    Returns:
        Seconds until every worker process had loaded and self-tested the version (0 when
        scoring in this process): the start-up cost, apart from scoring.

    Raises:
        BatchAbortedError: a worker failed or died; parts already written are kept.
    """
    if spec.workers <= 1 or len(pending) <= 1:
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
    started = time.monotonic()
    startup_s = 0.0
    context = multiprocessing.get_context("spawn")
    tasks: Any = context.Queue()
    results: Any = context.Queue()
    for unit in pending:
        tasks.put(unit.index)
    count = min(spec.workers, len(pending))
    for _ in range(count):
        tasks.put(None)
    processes = [
        context.Process(target=_worker, args=(spec, tasks, results), daemon=True)
        for _ in range(count)
    ]
    for process in processes:
        process.start()
    try:
        remaining, loading = len(pending), count
        while remaining:
            try:
                message = results.get(timeout=1.0)
            except queue.Empty:
                dead = [p for p in processes if p.exitcode not in (None, 0)]
                if dead:
                    raise BatchAbortedError(
                        f"worker process {dead[0].pid} exited with code {dead[0].exitcode}; "
                        "fix the cause and rerun with --resume"
                    ) from None
                continue
            if message[0] == "progress":
                progress(message[1], message[2])
            elif message[0] == "done":
                spec.out.record(message[1], message[2])
                remaining -= 1
            elif message[0] == "ready":
                loading -= 1
                if not loading:
                    startup_s = time.monotonic() - started
            else:
                raise BatchAbortedError(f"{message[1]}; rerun with --resume once fixed")
        for process in processes:
            process.join()
        return startup_s
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join()
