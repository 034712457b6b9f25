"""The Ray engine: the work units of a job scored by Ray actors across a cluster.

Ray Data schedules the job's work units (``ray.data.from_items`` -> ``map_batches`` with an
actor class): each actor loads the version and runs its self-tests once, then scores whole
units with the same code as the local engine and writes their parts itself. So both engines
write the same part files, in the same order whatever order the units finish in, and
``--resume`` works the same way. Input and output paths must be reachable from every node
(a shared filesystem), as the config and model code must be.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from servinglib.batch._local import WorkerSpec
from servinglib.batch._manifest import PartStats
from servinglib.batch._pipeline import score_unit
from servinglib.batch._source import WorkUnit
from servinglib.batch._spec import BatchAbortedError
from servinglib.errors import ConfigError, ServinglibError

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


class _UnitScorer:
    """One Ray actor: loads the version (self-tests first) once, then scores work units."""

    def __init__(self, spec: WorkerSpec) -> None:
        self._spec = spec
        self._scorer = spec.load_scorer()

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        spec = self._spec
        out: dict[str, list[Any]] = {
            "unit": [],
            "rows": [],
            "errors": [],
            "bytes": [],
            "sha256": [],
        }
        for index in batch["unit"]:
            unit = spec.source.units[int(index)]
            stats = score_unit(
                spec.source, unit, self._scorer, spec.out, spec.batch_size, lambda r, e: None
            )
            out["unit"].append(int(index))
            out["rows"].append(stats.rows)
            out["errors"].append(stats.errors)
            out["bytes"].append(stats.bytes)
            out["sha256"].append(stats.sha256)
        return out


def run_ray(
    spec: WorkerSpec,
    pending: Sequence[WorkUnit],
    progress: Callable[[int, int], None],
    *,
    address: str | None,
    cpus_per_worker: float,
    show_progress: bool,
) -> float:
    """Score ``pending`` units on a Ray cluster (``address``, or a new local one).

    Returns:
        Seconds from connecting to the cluster until the first unit was done: the fixed
        start-up cost (cluster, actors, each actor's load and self-tests).
    """
    ray = _import_ray()
    started = time.monotonic()
    # A new local cluster gets a CPU for Ray Data's own tasks beyond the actors, which would
    # otherwise hold every CPU of a small machine while those tasks wait for one.
    local_cpus = max(os.cpu_count() or 1, math.ceil(spec.workers * cpus_per_worker) + 1)
    ray.init(
        address=address,
        num_cpus=None if address else local_cpus,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        ignore_reinit_error=True,
    )
    first_done: float | None = None
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = show_progress
        if not pending:
            return 0.0
        units = ray.data.from_items(
            [{"unit": unit.index} for unit in pending], override_num_blocks=len(pending)
        )
        results = units.map_batches(
            _UnitScorer,
            fn_constructor_kwargs={"spec": spec},
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=min(spec.workers, len(pending))),
            num_cpus=cpus_per_worker,
        )
        try:
            for row in results.iter_rows():
                if first_done is None:
                    first_done = time.monotonic()
                stats = PartStats(
                    int(row["rows"]), int(row["errors"]), int(row["bytes"]), str(row["sha256"])
                )
                spec.out.record(int(row["unit"]), stats)
                progress(stats.rows, stats.errors)
        except ServinglibError:
            raise  # the error rate, judged by ``progress``
        except Exception as e:  # an actor failed to load, or a unit to score
            raise BatchAbortedError(
                f"the Ray job failed: {e}; parts already written are kept, fix the cause and "
                "rerun with --resume"
            ) from e
    finally:
        ray.shutdown()
    return (first_done or time.monotonic()) - started
