"""Model calls on the event loop's thread are cut off once they overrun their limit."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from servinglib.serving import loop_calls

# pytest-timeout's default method owns SIGALRM during a test; its thread method leaves it.
pytestmark = pytest.mark.timeout(60, method="thread")


def test_a_call_within_its_limit_returns_its_answer() -> None:
    assert loop_calls.available()
    assert loop_calls.call_bounded(5.0, lambda x: x + 1, 41) == 42


def test_a_call_that_waits_is_interrupted_even_when_the_model_catches_exceptions() -> None:
    def stubborn() -> str:
        while True:
            try:
                threading.Event().wait()
            except Exception:  # a model that swallows its errors still stops
                continue

    assert loop_calls.available()
    started = time.monotonic()
    with pytest.raises(loop_calls.LoopCallOverran):
        loop_calls.call_bounded(0.05, stubborn)
    assert time.monotonic() - started < 5


def test_an_overrun_is_reported_and_nothing_fires_afterwards() -> None:
    assert loop_calls.available()
    done, value = loop_calls.run_on_loop("m", "1", time.sleep, 10)
    assert (done, value) == (False, None)
    time.sleep(0.1)  # the timer is disarmed: no late interruption here


def test_only_the_main_thread_runs_bounded_calls() -> None:
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(loop_calls.available()))
    thread.start()
    thread.join()
    assert answers == [False]
