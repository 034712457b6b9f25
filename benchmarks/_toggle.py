"""Switch one part of a running server's request path off and on again, to measure what it
costs on the same processes.

Two servers with the same code differ by a few percent in requests/s on a 2-core machine
(where their workers and memory land), so a setup served by one server reads that luck as
its cost. Measuring one server both ways takes it out. Parts:

* ``tracing``: ``servinglib.serving.tracing.ACTIVE`` swapped with None (a worker whose
  tracing is on);
* ``prediction-log``: each ``InferenceService``'s answer recorder swapped with None (a
  worker whose prediction log is on).

Benchmark scaffolding only: the server has no such switch. A ``sitecustomize`` that only
these benchmarks put first on the workers' path installs a signal handler in each worker;
each worker writes its state to a file of its own in :attr:`Toggle.states`.

Example::

    toggle = Toggle(workdir, "tracing")
    server = start_servinglib(config, workdir, source=Path(f"{toggle.site}:{ROOT}"),
                              env={**otlp, **toggle.env})
    toggle.switch(server, on=False)
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _load import LoadResult, Server

__all__ = ["Toggle", "ratio_summary", "toggle_rounds", "worker_pids"]

SIGNAL = signal.SIGRTMIN + 1

SITE = """\
import gc
import os
import signal

_DIRECTORY = os.environ.get("BENCH_TOGGLE_DIR")
_PART = os.environ.get("BENCH_TOGGLE_PART")
_SAVED = {}


def _tracing(on):
    from servinglib.serving import tracing

    if on:
        tracing.ACTIVE = _SAVED.pop("tracing", tracing.ACTIVE)
    elif tracing.ACTIVE is not None:
        _SAVED["tracing"], tracing.ACTIVE = tracing.ACTIVE, None


def _prediction_log(on):
    from servinglib.serving.service import InferenceService

    services = _SAVED.get("services")
    if services is None:  # the worker froze its objects after loading (gc.freeze)
        gc.unfreeze()
        try:
            services = [o for o in gc.get_objects() if isinstance(o, InferenceService)]
        finally:
            gc.freeze()
        _SAVED["services"] = services
    if not services:
        raise RuntimeError("no InferenceService in this worker")
    for service in services:
        if on:
            service._recorder = _SAVED.pop(id(service), service._recorder)
        elif service._recorder is not None:
            _SAVED[id(service)], service._recorder = service._recorder, None


_PARTS = {"tracing": _tracing, "prediction-log": _prediction_log}
_ON = [True]


def _toggle(signum, frame):
    try:
        _PARTS[_PART](not _ON[0])
        _ON[0] = not _ON[0]
        state = "on" if _ON[0] else "off"
    except Exception as e:  # said to the benchmark, which stops: never into the worker
        state = f"failed: {e!r}"
    with open(os.path.join(_DIRECTORY, str(os.getpid())), "w") as f:
        f.write(state)


if _DIRECTORY and _PART in _PARTS:
    os.register_at_fork(after_in_child=lambda: signal.signal(signal.SIGRTMIN + 1, _toggle))
"""


def worker_pids(server: Server) -> list[str]:
    """The gunicorn workers of ``server``."""
    found = subprocess.run(
        ["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True, check=True
    )
    return found.stdout.split()


class Toggle:
    """The switch of one part (``tracing`` or ``prediction-log``) in servers started with
    :attr:`site` first on their path and :attr:`env` in their environment."""

    def __init__(self, workdir: Path, part: str) -> None:
        self.site = Path(tempfile.mkdtemp(prefix=f"toggle-{part}-", dir=workdir))
        self.states = self.site / "states"
        self.states.mkdir()
        (self.site / "sitecustomize.py").write_text(SITE)
        self.env = {"BENCH_TOGGLE_DIR": str(self.states), "BENCH_TOGGLE_PART": part}

    def switch(self, server: Server, on: bool) -> None:
        """Turn the part on or off in every worker of ``server``; waits until each says so.

        Raises:
            SystemExit: a worker did not answer within 10 s.
        """
        want = "on" if on else "off"
        workers = worker_pids(server)

        def state(pid: str) -> str:
            path = self.states / pid
            return path.read_text() if path.exists() else "on"  # a worker starts with it on

        for pid in workers:
            if state(pid) != want:
                os.kill(int(pid), SIGNAL)
        deadline = time.monotonic() + 10
        while (states := [state(pid) for pid in workers]) != [want] * len(workers):
            failed = [found for found in states if found.startswith("failed")]
            if failed:
                raise SystemExit(f"workers {workers} could not turn {want}: {failed}")
            if time.monotonic() > deadline:
                raise SystemExit(f"workers {workers} did not turn {want} within 10 s")
            time.sleep(0.02)


def toggle_rounds(
    servers: list[Server],
    toggle: Toggle,
    load: Callable[[Server, bool], tuple[LoadResult, float]],
    repeats: int,
) -> dict[str, float]:
    """Each server loaded with the part on and off in turns, ``repeats`` pairs each (the
    order alternating): the median ratio on/off of requests/s, its quartiles, the median
    CPU per request each way and the number of pairs. ``load(server, on)`` returns the run
    and the server's CPU per request in microseconds."""
    cpu: dict[bool, list[float]] = {True: [], False: []}
    ratios: list[float] = []
    for repeat in range(repeats):
        for number, server in enumerate(servers):
            found: dict[bool, float] = {}
            for on in (True, False) if (repeat + number) % 2 == 0 else (False, True):
                toggle.switch(server, on)
                result, cpu_us = load(server, on)
                cpu[on].append(cpu_us)
                found[on] = result.rps
            ratios.append(found[True] / found[False])
    for server in servers:
        toggle.switch(server, True)
    return {
        **ratio_summary(ratios),
        "cpu_on": statistics.median(cpu[True]),
        "cpu_off": statistics.median(cpu[False]),
    }


def ratio_summary(ratios: list[float]) -> dict[str, float]:
    """The median of paired runs' ratios (``ratio``), its quartiles (``low``, ``high``) and
    the number of pairs (``pairs``)."""
    ordered = sorted(ratios)
    return {
        "ratio": statistics.median(ordered),
        "low": ordered[len(ordered) // 4],
        "high": ordered[(3 * len(ordered)) // 4],
        "pairs": len(ordered),
    }
