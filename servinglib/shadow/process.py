"""Shadow versions in a process of their own, so CPU-bound shadows cannot take the primary's CPU.

With ``shadow_executor.isolation: process`` each worker starts one child process at the
lowest CPU priority (nice 19 and, on Linux, SCHED_IDLE). It loads the configured shadow
versions from the same servinglib.yaml and answers one copy at a time (so each instance is
used by one thread at a time), over a socket pair carrying pickled messages. The child has
its own interpreter lock, and the kernel gives the worker's threads the CPU first whenever
both want it.

The worker side (:class:`ShadowProcess`) sends ``(id, model, version, features, deadline)``
and gets ``(id, outcome, value, cpu_seconds)`` back. A copy the child cannot start before
its deadline is answered ``late`` at once; a child that stays silent past a copy's deadline
plus a margin is killed and started again on a later copy (at most once per ``restart_s``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from servinglib.config.spec import ServiceConfig, load_config
from servinglib.errors import (
    DeadlineExceededError,
    ModelNotReadyError,
    ServinglibError,
    VersionNotFoundError,
)
from servinglib.lifecycle.registry import ModelRegistry, ReadyVersion

__all__ = ["ShadowProcess", "ShadowProcessError"]

log = logging.getLogger("servinglib.shadow.router")

NICENESS = 19  # the lowest CPU priority: the worker's threads run first when both want a core


class ShadowProcessError(Exception):
    """A shadow copy failed in the shadow process (the model raised, or the process died)."""


class ShadowProcess:
    """The worker's end of its shadow process: send a copy, wait for its answer.

    Example::

        shadows = ShadowProcess(Path("servinglib.yaml"))
        shadows.call("eta", "2", {"distance_km": 2.0}, timeout_s=1.0)
        shadows.close()
    """

    def __init__(
        self,
        config_path: Path,
        kill_margin_s: float = 5.0,
        restart_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        on_cpu: Callable[[float], None] | None = None,
    ) -> None:
        self._config_path = config_path
        self._kill_margin_s = kill_margin_s
        self._restart_s = restart_s
        self._clock = clock
        self._on_cpu = on_cpu  # told the CPU seconds of every copy the process answered
        self._lock = threading.Lock()  # guards the process fields and the pending copies
        self._send_lock = threading.Lock()  # one writer at a time (a send may block)
        self._ids = itertools.count()
        self._pending: dict[int, tuple[Connection, Future[Any]]] = {}
        self._process: subprocess.Popen[bytes] | None = None
        self._connection: Connection | None = None
        self._loaded = threading.Event()  # the current process has loaded its versions
        self._started_at = -float("inf")
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The shadow process's id, while one runs."""
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        """Start the shadow process now (it loads its versions in the background)."""
        with self._lock:
            self._ensure_running()

    def wait_loaded(self, timeout_s: float) -> bool:
        """Wait until the process has loaded its versions; False if it did not (or died)."""
        deadline = self._clock() + timeout_s
        while not self._loaded.wait(0.1):
            process = self._process
            if process is None or process.poll() is not None or self._clock() > deadline:
                return False
        return True

    def call(self, model: str, version: str, features: Any, timeout_s: float) -> Any:
        """Run one copy in the shadow process and return its answer.

        Raises:
            DeadlineExceededError: no answer within ``timeout_s``.
            ModelNotReadyError: the version cannot answer there, or the process is down.
            ShadowProcessError: the model raised, or the process died during the call.
        """
        deadline = self._clock() + timeout_s
        future: Future[Any] = Future()
        call_id = next(self._ids)
        with self._lock:
            connection = self._ensure_running()
            if connection is None:
                raise ModelNotReadyError(
                    model, version, "unavailable", "the shadow process is restarting"
                )
            if not self._loaded.is_set():  # nothing queues behind a loading process
                raise ModelNotReadyError(
                    model, version, "loading", "the shadow process is loading its versions"
                )
            self._pending[call_id] = (connection, future)
        try:
            with self._send_lock:
                connection.send((call_id, model, version, features, deadline))
        except (OSError, ValueError) as e:  # died meanwhile (ValueError: closed here)
            self._forget(call_id)
            raise ShadowProcessError(f"the shadow process is gone: {e}") from e
        try:
            return future.result(timeout=max(0.0, deadline - self._clock()))
        except FutureTimeout:
            pass
        try:  # silent past the deadline: late, or hung for good?
            future.result(timeout=self._kill_margin_s)
        except FutureTimeout:
            self._kill(connection, f"no answer {self._kill_margin_s:g} s past a deadline")
        except Exception:  # the late answer's own failure changes nothing: it was late
            log.debug("a late shadow answer failed", exc_info=True)
        finally:
            self._forget(call_id)
        raise DeadlineExceededError(f"shadow {model!r} version {version!r}: no answer in time")

    def _ensure_running(self) -> Connection | None:
        """The live connection, starting a process when none runs (caller holds the lock)."""
        if self._closed:
            return None
        if self._process is not None and self._process.poll() is None:
            return self._connection
        if self._clock() - self._started_at < self._restart_s:
            return None
        self._started_at = self._clock()
        ours, theirs = socket.socketpair()
        with theirs:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "servinglib.shadow.process",
                    str(self._config_path),
                    str(theirs.fileno()),
                ],
                pass_fds=(theirs.fileno(),),
            )
        connection = Connection(ours.detach())
        self._connection = connection
        self._loaded = loaded = threading.Event()
        threading.Thread(
            target=self._read,
            args=(connection, loaded),
            name="servinglib-shadow-reader",
            daemon=True,
        ).start()
        log.info("shadow process %d started (nice %d)", self._process.pid, NICENESS)
        return connection

    def _read(self, connection: Connection, loaded: threading.Event) -> None:
        """Hand each answer to its waiting copy until the process goes away."""
        while True:
            try:
                call_id, outcome, value, cpu_s = connection.recv()
            except (EOFError, OSError):
                break
            if self._on_cpu is not None and cpu_s:
                self._on_cpu(cpu_s)
            if outcome == "loaded":
                loaded.set()
                continue
            entry = self._forget(call_id)
            if entry is None:  # its caller gave up already
                continue
            future = entry[1]
            if outcome == "ok":
                future.set_result(value)
            elif outcome == "late":
                future.set_exception(DeadlineExceededError(value))
            elif outcome == "not_ready":
                future.set_exception(ModelNotReadyError(*value))
            else:
                future.set_exception(ShadowProcessError(value))
        self._close_once(connection)
        with self._lock:
            if self._connection is connection:
                self._connection = None
            orphans = [i for i, (c, _) in self._pending.items() if c is connection]
            futures = [self._pending.pop(i)[1] for i in orphans]
        for future in futures:
            future.set_exception(ShadowProcessError("the shadow process exited during the call"))

    def _close_once(self, connection: Connection) -> None:
        """Close ``connection`` unless :meth:`close` (or this reader) did: a second
        ``os.close`` of the same descriptor fails with EBADF, or closes a file another
        thread has opened since under the same number."""
        with self._lock:
            if not connection.closed:
                with contextlib.suppress(OSError):
                    connection.close()

    def _forget(self, call_id: int) -> tuple[Connection, Future[Any]] | None:
        with self._lock:
            return self._pending.pop(call_id, None)

    def _kill(self, connection: Connection, why: str) -> None:
        """Kill the process behind ``connection``, unless it is gone already."""
        with self._lock:
            process = self._process if self._connection is connection else None
        if process is not None and process.poll() is None:
            log.error("shadow process %d killed: %s; it restarts on a later copy", process.pid, why)
            process.kill()
            process.wait()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the process: it finishes its current copy, then exits (killed after timeout)."""
        with self._lock:
            self._closed = True
            process, connection = self._process, self._connection
        if connection is not None:
            self._close_once(connection)  # the process reads its end's EOF and exits
        if process is None:
            return
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def shadow_versions(config: ServiceConfig) -> list[tuple[str, str]]:
    """Every ``(model, version)`` some model shadows to, in config order."""
    return [(m.name, s.version) for m in config.models for s in m.shadows]


class _Child:
    """The shadow process itself: load the shadow versions, answer copies one at a time."""

    def __init__(self, config: ServiceConfig) -> None:
        # One copy of each version is enough: the child runs one call at a time.
        models = tuple(dataclasses.replace(m, instances=None) for m in config.models)
        self._registry = ModelRegistry(dataclasses.replace(config, models=models))
        for model, version in shadow_versions(config):
            try:
                record = self._registry.record(model, version)
            except VersionNotFoundError as e:  # perhaps loaded later through the admin API
                log.warning("%s; loading it when a copy asks for it", e)
                continue
            self._registry.load_version(self._registry.model_config(model), record)

    def _ready(self, model: str, version: str) -> ReadyVersion:
        try:
            return self._registry.get(model, version)
        except VersionNotFoundError:  # loaded through the admin API after this process started
            self._registry.add_version(model, version)
            return self._registry.get(model, version)

    def answer(self, model: str, version: str, features: Any) -> tuple[str, Any]:
        """``(outcome, value)`` for one copy; never raises."""
        try:
            ready = self._ready(model, version)
        except ModelNotReadyError as e:
            return "not_ready", (e.model, e.version, e.state, e.reason)
        except ServinglibError as e:
            return "not_ready", (model, version, "unavailable", str(e))
        try:
            instance = ready.instance
            payload = instance.prepare(features)
            if self._registry.model_config(model).batching is not None:
                return "ok", instance.predict_batch([payload])[0]
            return "ok", instance.predict(payload)
        except Exception as e:
            log.warning("shadow %r version %r raised", model, version, exc_info=True)
            return "error", f"{type(e).__name__}: {e}"


def _lowest_priority() -> None:
    """nice 19, and Linux's SCHED_IDLE where there is one.

    A nice-19 process that is running when a worker thread wakes up may keep the core
    until the scheduler's next decision (measured: +71 % on the primary's p95 with the
    shadow at nice 19 alone); a SCHED_IDLE one is preempted at once.
    """
    os.nice(NICENESS)
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or refused
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def _exit_with_parent(parent: int) -> None:
    """Exit once the worker is gone, even while a copy hangs (no EOF would be read then)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def main(argv: list[str]) -> int:
    """``python -m servinglib.shadow.process CONFIG FD``: serve copies until EOF."""
    config_path, fd = Path(argv[0]), int(argv[1])
    _lowest_priority()  # first: every thread started later inherits it
    for stop in (signal.SIGINT, signal.SIGTERM):  # a signal to the group: the worker decides
        signal.signal(stop, signal.SIG_IGN)  # (this process leaves when its socket closes)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s [shadow %(process)d] %(levelname)s %(name)s: %(message)s",
    )
    connection = Connection(fd)
    config = load_config(config_path)
    logging.getLogger().setLevel(config.server.log_level.upper())
    child = _Child(config)
    connection.send((-1, "loaded", None, 0.0))
    _serve(connection, child)
    return 0


def _serve(connection: Connection, child: _Child) -> None:
    """Answer copies one at a time, each with the CPU seconds it took, until EOF."""
    while True:
        try:
            call_id, model, version, features, deadline = connection.recv()
        except (EOFError, OSError):
            return
        cpu = time.process_time()
        if time.monotonic() >= deadline:  # CLOCK_MONOTONIC is the same in every process
            late = f"shadow {model!r} version {version!r}: queued past its deadline"
            reply: tuple[str, Any] = ("late", late)
        else:
            reply = child.answer(model, version, features)
        cpu_s = time.process_time() - cpu
        try:
            connection.send((call_id, *reply, cpu_s))
        except (OSError, ValueError):
            return
        except Exception as e:  # an answer pickle cannot carry
            connection.send((call_id, "error", f"the answer cannot be sent back: {e}", cpu_s))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
