"""servinglib.compose._step_threads: results and errors reach the step; close never waits."""

from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import CancelledError

import pytest

from servinglib.compose._step_threads import StepThreads


def test_results_and_errors_reach_the_waiting_step() -> None:
    steps = StepThreads(2, "test-step")
    futures = [steps.submit(functools.partial(pow, i, 2)) for i in range(5)]
    assert [future.result(timeout=10) for future in futures] == [0, 1, 4, 9, 16]
    with pytest.raises(ZeroDivisionError):
        steps.submit(lambda: 1 / 0).result(timeout=10)
    steps.close()


def test_close_does_not_wait_for_a_hung_step_and_cancels_what_had_not_started() -> None:
    steps = StepThreads(1, "test-step")
    started, release = threading.Event(), threading.Event()

    def hang() -> str:
        started.set()
        release.wait()
        return "late"

    hung = steps.submit(hang)
    assert started.wait(10)
    queued = steps.submit(lambda: "never")
    began = time.monotonic()
    steps.close()
    assert time.monotonic() - began < 5
    with pytest.raises(CancelledError):
        queued.result(timeout=0)
    threads = [t for t in threading.enumerate() if t.name.startswith("test-step")]
    assert threads
    assert all(t.daemon for t in threads)  # the interpreter's exit does not join them
    with pytest.raises(RuntimeError, match="closed"):
        steps.submit(lambda: None)
    release.set()
    assert hung.result(timeout=10) == "late"
