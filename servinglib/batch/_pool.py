"""The parent's side of the local engine: hand out units, time calls, replace hung workers.

Each worker gets its own pipes (units in, reports out): a worker killed while it reports
can corrupt only its own pipe, which is dropped with it. Reports from a killed worker that
were still in flight are dropped too, and the rows it had reported for units it did not
finish are taken back from the progress count, since its replacement scores those units
again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from servinglib.batch._calls import ANSWERED, SLOT_SIZE, STARTED, hung_rows
from servinglib.batch._manifest import PartStats
from servinglib.batch._pipeline import ProgressCallback
from servinglib.batch._source import WorkUnit
from servinglib.batch._spec import BatchAbortedError

if TYPE_CHECKING:
    from servinglib.batch._local import WorkerSpec

__all__ = ["HUNG_IN_A_ROW", "WorkerPool"]

HUNG_IN_A_ROW = 3  # calls timed out with none answered in between: the model hangs on all
_AHEAD = 2  # units a worker holds: the one it scores and the one its read stage opens next
_POLL_S = 0.1
_EXIT_S = 30.0  # for a worker to exit once its units are done; then it is killed


@dataclass
class _Worker:
    """One worker process and what it holds."""

    process: Any
    tasks: Connection
    results: Connection
    units: list[int] = field(default_factory=list)  # handed out, part not yet written
    reported: dict[int, tuple[int, int]] = field(default_factory=dict)  # unit -> rows, errors
    stopping: bool = False  # told that no unit follows


class WorkerPool:
    """Worker processes scoring units under a per-call timeout (``spec.call_timeout_s``)."""

    def __init__(
        self,
        context: Any,
        spec: WorkerSpec,
        target: Callable[..., None],
        progress: ProgressCallback,
    ) -> None:
        self._context = context
        self._spec = spec
        self._target = target
        self._progress = progress
        self._queue: list[int] = []
        self._hung: dict[int, set[int]] = {}  # unit -> rows that hung alone: error rows
        self._suspect: dict[int, set[int]] = {}  # unit -> rows of a call that hung
        self._workers: dict[int, _Worker] = {}
        self._slots: dict[int, Any] = {}
        self._answered_at_timeout = -1.0
        self._timeouts_in_a_row = 0

    def run(self, pending: Sequence[WorkUnit]) -> float:
        """Score ``pending``; returns seconds until every first worker was ready."""
        started = time.monotonic()
        startup_s = 0.0
        self._queue = [unit.index for unit in pending]
        count = min(self._spec.workers, len(pending))
        loading = set(range(count))
        try:
            for number in range(count):
                self._slots[number] = self._context.Array("d", SLOT_SIZE, lock=False)
                self._start(number)
            while self._queue or any(w.units for w in self._workers.values()):
                for number in self._readable():
                    message = self._receive(number)
                    if message is None:
                        continue
                    if message[0] == "ready" and number in loading:
                        loading.discard(number)
                        if not loading:
                            startup_s = time.monotonic() - started
                    else:
                        self._handle(number, message)
                self._check_exits()
                self._check_calls()
            for worker in self._workers.values():
                worker.process.join(timeout=_EXIT_S)  # done: told to stop, it exits
            return startup_s
        finally:
            self._stop_all()

    def _start(self, number: int, units: Sequence[int] = ()) -> None:
        """Start worker ``number`` (again) and hand it ``units``, then more from the queue."""
        tasks_out, tasks_in = self._context.Pipe(duplex=False)  # (receive end, send end)
        results_in, results_out = self._context.Pipe(duplex=False)
        slot = self._slots[number]
        slot[STARTED] = 0.0
        process = self._context.Process(
            target=self._target,
            args=(self._spec, number, slot, tasks_out, results_out),
            daemon=True,
        )
        process.start()
        tasks_out.close()
        results_out.close()  # the worker's ends: their copies live in the worker
        worker = _Worker(process, tasks_in, results_in)
        self._workers[number] = worker
        for index in units:
            self._assign(worker, index)
        self._feed(worker)

    def _assign(self, worker: _Worker, index: int) -> None:
        worker.units.append(index)
        hung, suspect = self._hung.get(index, set()), self._suspect.get(index, set())
        worker.tasks.send((index, sorted(hung), sorted(suspect - hung)))

    def _feed(self, worker: _Worker) -> None:
        """Keep ``worker`` holding ``_AHEAD`` units; tell it to stop once none are left."""
        while self._queue and len(worker.units) < _AHEAD and not worker.stopping:
            self._assign(worker, self._queue.pop(0))
        if not self._queue and not worker.stopping:
            worker.tasks.send(None)
            worker.stopping = True  # no more units for it: it exits after the ones it holds

    def _readable(self) -> list[int]:
        conns = {w.results: n for n, w in self._workers.items() if not w.results.closed}
        ready = wait(list(conns), timeout=_POLL_S)
        return [conns[c] for c in ready if isinstance(c, Connection) and c in conns]

    def _receive(self, number: int) -> tuple[Any, ...] | None:
        worker = self._workers[number]
        try:
            message: tuple[Any, ...] = worker.results.recv()
        except (EOFError, OSError):
            worker.results.close()  # the worker exited; _check_exits judges how
            return None
        return message

    def _handle(self, number: int, message: tuple[Any, ...]) -> None:
        worker = self._workers[number]
        kind = message[0]
        if kind == "progress":
            unit, rows, errors = message[2], message[3], message[4]
            before = worker.reported.get(unit, (0, 0))
            worker.reported[unit] = (before[0] + rows, before[1] + errors)
            self._progress(rows, errors)
        elif kind == "done":
            unit, stats = message[2], message[3]
            assert isinstance(stats, PartStats)
            self._spec.out.record(unit, stats)
            worker.units.remove(unit)
            worker.reported.pop(unit, None)
            self._feed(worker)
        elif kind == "failed":
            raise BatchAbortedError(f"{message[2]}; rerun with --resume once fixed")

    def _check_exits(self) -> None:
        for worker in self._workers.values():
            code = worker.process.exitcode
            if code is not None and (code != 0 or worker.units) and worker.results.closed:
                raise BatchAbortedError(
                    f"worker process {worker.process.pid} exited with code {code}; "
                    "fix the cause and rerun with --resume"
                )

    def _check_calls(self) -> None:
        timeout_s = self._spec.call_timeout_s
        if timeout_s <= 0:
            return
        now = time.monotonic()
        for number, worker in list(self._workers.items()):
            slot = self._slots[number]
            started = slot[STARTED]
            if not started or now - started <= timeout_s or worker.process.exitcode is not None:
                continue
            hung = hung_rows(slot, started)
            if hung is not None:
                self._replace(number, *hung)

    def _replace(self, number: int, unit: int, rows: range) -> None:
        """Kill worker ``number`` (its call hung on ``rows`` of ``unit``), start a fresh one."""
        worker = self._workers[number]
        worker.process.kill()
        worker.process.join()
        worker.tasks.close()
        worker.results.close()
        for taken_rows, taken_errors in worker.reported.values():
            self._progress(-taken_rows, -taken_errors)  # its replacement scores them again
        out = self._spec.out
        for index in worker.units:  # the part it was writing when killed
            (out.path / f".{out.part_path(index).name}.{worker.process.pid}.tmp").unlink(
                missing_ok=True
            )
        # the rows of a call of several are called again one at a time: only a row that
        # hangs alone fails (it costs one more timeout and worker start per hanging row)
        marked = self._hung if len(rows) == 1 else self._suspect
        marked.setdefault(unit, set()).update(rows)
        answered = sum(slot[ANSWERED] for slot in self._slots.values())
        same = answered == self._answered_at_timeout
        self._timeouts_in_a_row = self._timeouts_in_a_row + 1 if same else 1
        self._answered_at_timeout = answered
        timeout_s = self._spec.call_timeout_s
        if self._timeouts_in_a_row >= HUNG_IN_A_ROW:
            path = self._spec.source.units[unit].path
            raise BatchAbortedError(
                f"the model hangs: {self._timeouts_in_a_row} calls in a row ran past "
                f"--call-timeout-s {timeout_s:g} s with none answered in between (the last on "
                f"rows {rows.start}-{rows.stop - 1} of work unit {unit}, {path}); fix the "
                "model, or raise --call-timeout-s if its calls are only slow, then rerun with "
                "--resume"
            )
        self._start(number, worker.units)

    def _stop_all(self) -> None:
        for worker in self._workers.values():
            if worker.process.is_alive():
                worker.process.kill()  # a hung call ignores anything gentler
                worker.process.join()
            worker.tasks.close()
            worker.results.close()
