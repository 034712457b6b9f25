"""DynamicBatcher.close: waits for calls someone still waits for, never for abandoned ones.

The batcher's clock is injected: a call is past its deadline when the test says so.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from servinglib.config.spec import BatchPolicy
from servinglib.errors import OverloadedError
from servinglib.serving.batching import DynamicBatcher


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Hanging:
    """A model call that runs until released; tells when it started."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, batch: list[Any]) -> list[Any]:
        self.started.set()
        self.release.wait()
        return batch


def _closed_in(batcher: DynamicBatcher, timeout_s: float) -> float:
    started = time.monotonic()
    batcher.close(timeout_s)
    return time.monotonic() - started


def test_a_call_past_every_deadline_of_its_batch_is_not_waited_for() -> None:
    clock, call = Clock(), Hanging()
    batcher = DynamicBatcher(call, BatchPolicy(max_batch_size=1, max_queue_size=8), clock=clock)
    running = batcher.submit("hung", deadline=100.5)
    assert call.started.wait(10)
    queued = batcher.submit("queued", deadline=100.5)
    clock.now = 101.0  # both callers were answered 504 at 100.5
    assert _closed_in(batcher, timeout_s=30) < 5  # not the 30 s timeout
    assert not running.done()  # still running: nobody waits for it
    with pytest.raises(OverloadedError, match="shutting down"):
        queued.result(timeout=0)
    call.release.set()


def test_a_call_within_its_deadline_is_waited_for_and_answered() -> None:
    clock, call = Clock(), Hanging()
    batcher = DynamicBatcher(call, BatchPolicy(max_batch_size=1), clock=clock)
    running = batcher.submit("answerable", deadline=160.0)
    assert call.started.wait(10)
    threading.Timer(0.2, call.release.set).start()
    batcher.close(timeout_s=30)
    assert running.result(timeout=0) == "answerable"


def test_a_call_without_a_deadline_is_waited_for_up_to_the_timeout() -> None:
    call = Hanging()
    batcher = DynamicBatcher(call, BatchPolicy(max_batch_size=1), clock=Clock())
    running = batcher.submit("no deadline")
    assert call.started.wait(10)
    assert _closed_in(batcher, timeout_s=0.3) >= 0.3
    assert not running.done()
    call.release.set()
    assert running.result(timeout=10) == "no deadline"
