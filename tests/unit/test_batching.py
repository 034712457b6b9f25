"""servinglib.serving.batching: Triton semantics, driven by an injected clock (no sleeps)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from servinglib.config.spec import BatchPolicy
from servinglib.errors import DeadlineExceededError, ModelNotReadyError, OverloadedError
from servinglib.serving.batching import DynamicBatcher


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Recorder:
    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.queued: list[float] = []
        self.depths: list[int] = []

    def batch_executed(self, model: str, version: str, size: int) -> None:
        self.sizes.append(size)

    def request_queued(self, model: str, version: str, seconds: float) -> None:
        self.queued.append(seconds)

    def queue_depth(self, model: str, version: str, depth: int) -> None:
        self.depths.append(depth)


def double(batch: Sequence[Any]) -> list[Any]:
    return [2 * x for x in batch]


def manual(policy: BatchPolicy, run: Any = double) -> tuple[DynamicBatcher, Clock, Recorder]:
    clock, recorder = Clock(), Recorder()
    return DynamicBatcher(run, policy, clock=clock, listener=recorder, start=False), clock, recorder


def drain(batcher: DynamicBatcher, run: Any = double) -> list[list[Any]]:
    batches = []
    while (batch := batcher.next_batch(timeout=0)) is not None:
        batches.append([item.payload for item in batch])
        batcher.run(batch, run)
    return batches


def test_full_batches_go_at_once_and_the_rest_waits_for_the_delay() -> None:
    batcher, clock, recorder = manual(BatchPolicy(max_batch_size=4, max_queue_delay_us=2000))
    with batcher.incoming():  # another request is on its way: the batcher may wait
        futures = [batcher.submit(x) for x in range(10)]
        assert drain(batcher) == [[0, 1, 2, 3], [4, 5, 6, 7]]
        assert batcher.next_batch(timeout=0) is None  # 2 queued, delay not reached
        clock.advance(0.0019)
        assert batcher.next_batch(timeout=0) is None
        clock.advance(0.0002)
        assert drain(batcher) == [[8, 9]]
    assert [f.result() for f in futures] == [2 * x for x in range(10)]
    assert recorder.sizes == [4, 4, 2]
    assert recorder.queued[-1] == pytest.approx(0.0021)


def test_a_lone_request_is_never_taxed_with_the_delay() -> None:
    batcher, _, _ = manual(BatchPolicy(max_batch_size=32, max_queue_delay_us=1_000_000))
    future = batcher.submit(21)
    assert drain(batcher) == [[21]]  # nobody else is coming: no waiting
    assert future.result() == 42


def test_an_announced_request_stops_being_awaited_when_it_is_submitted() -> None:
    batcher, _, _ = manual(BatchPolicy(max_batch_size=32, max_queue_delay_us=1_000_000))
    with batcher.incoming() as arrival:
        future = batcher.submit(21, arrival=arrival)
        # Still inside its own announcement, yet nobody else is coming: no waiting.
        assert drain(batcher) == [[21]]
    assert future.result() == 42
    with batcher.incoming() as first, batcher.incoming():
        batcher.submit(1, arrival=first)
        assert batcher.next_batch(timeout=0) is None  # the second one is still on its way


def test_a_refused_announced_request_is_no_longer_awaited() -> None:
    batcher, _, _ = manual(BatchPolicy(max_batch_size=8, max_queue_size=1))
    batcher.submit(1)
    with pytest.raises(OverloadedError), batcher.incoming() as arrival:
        batcher.submit(2, arrival=arrival)
    assert drain(batcher) == [[1]]  # not waiting for the refused request


def test_preferred_batch_sizes_dispatch_early() -> None:
    batcher, _, _ = manual(
        BatchPolicy(max_batch_size=16, preferred_batch_sizes=(4, 8), max_queue_delay_us=10**6)
    )
    with batcher.incoming():
        for x in range(5):
            batcher.submit(x)
        assert batcher.next_batch(timeout=0) is None  # 5 < 8: wait for the largest preferred size
        for x in range(5, 11):
            batcher.submit(x)
        assert [item.payload for item in batcher.next_batch(timeout=0) or []] == list(range(8))


def test_priorities_and_fifo_order() -> None:
    batcher, clock, _ = manual(BatchPolicy(max_batch_size=3, priority_levels=2, default_priority=1))
    for x in ("low-a", "low-b"):
        batcher.submit(x)
    batcher.submit("high", priority=0)
    batcher.submit("low-c")
    assert drain(batcher, run=list) == [["high", "low-a", "low-b"]]
    clock.advance(0.0021)  # fewer than last time: it waits the queue delay for company
    assert drain(batcher, run=list) == [["low-c"]]


def test_after_a_batch_of_n_the_next_waits_for_n_or_the_delay_then_forgets() -> None:
    """Callers that cannot announce requests (an event loop) still get whole batches."""
    batcher, clock, _ = manual(BatchPolicy(max_batch_size=8, max_queue_delay_us=2000))
    for x in range(4):
        batcher.submit(x)
    assert drain(batcher) == [[0, 1, 2, 3]]
    batcher.submit(10)  # the first client of the previous batch is back
    assert batcher.next_batch(timeout=0) is None
    for x in (11, 12, 13):
        batcher.submit(x)
    assert drain(batcher) == [[10, 11, 12, 13]]  # as many as last time: no waiting
    batcher.submit(14)
    clock.advance(0.001)
    assert batcher.next_batch(timeout=0) is None
    clock.advance(0.0011)  # the queue delay is the most it ever waits
    assert drain(batcher) == [[14]]
    clock.advance(0.021)  # ten queue delays without a batch: the previous size is forgotten
    batcher.submit(15)
    batcher.submit(16)
    assert drain(batcher) == [[15, 16]]
    clock.advance(0.021)
    batcher.submit(17)
    assert drain(batcher) == [[17]]  # a lone request after a quiet spell never waits


def test_bounded_queue_refuses_at_once() -> None:
    batcher, _, recorder = manual(BatchPolicy(max_queue_size=3))
    for x in range(3):
        batcher.submit(x)
    with pytest.raises(OverloadedError, match="3 requests queued"):
        batcher.submit(99)
    assert recorder.depths == [1, 2, 3]
    drain(batcher)
    batcher.submit(4)  # room again once drained


def test_poison_input_fails_alone() -> None:
    calls: list[list[int]] = []

    def fragile(batch: Sequence[int]) -> list[int]:
        calls.append(list(batch))
        if 5 in batch:
            raise ValueError("cannot handle 5")
        return [x + 1 for x in batch]

    batcher, _, recorder = manual(BatchPolicy(max_batch_size=8), run=fragile)
    futures = [batcher.submit(x) for x in range(8)]
    drain(batcher, run=fragile)
    for x, future in enumerate(futures):
        if x == 5:
            with pytest.raises(ValueError, match="cannot handle 5"):
                future.result()
        else:
            assert future.result() == x + 1
    assert len(calls) <= 1 + 2 * 3  # bisection: O(log n) extra runs
    assert sum(recorder.sizes) == 7


def test_wrong_number_of_results_is_isolated_too() -> None:
    batcher, _, _ = manual(
        BatchPolicy(max_batch_size=4), run=lambda batch: [0] if len(batch) > 1 else [1]
    )
    futures = [batcher.submit(x) for x in range(4)]
    drain(batcher, run=lambda batch: [0] if len(batch) > 1 else [1])
    assert [f.result() for f in futures] == [1, 1, 1, 1]


def test_expired_requests_are_not_started() -> None:
    ran: list[int] = []

    def run(batch: Sequence[int]) -> list[int]:
        ran.extend(batch)
        return list(batch)

    batcher, clock, _ = manual(BatchPolicy(max_batch_size=4), run=run)
    late = batcher.submit(1, deadline=clock.now + 0.5)
    fine = batcher.submit(2, deadline=clock.now + 5)
    clock.advance(1.0)
    drain(batcher, run=run)
    with pytest.raises(DeadlineExceededError, match="not started"):
        late.result()
    assert fine.result() == 2
    assert ran == [2]


def test_results_reach_the_right_caller_under_32_threads() -> None:
    recorder = Recorder()
    batcher = DynamicBatcher(
        double, BatchPolicy(max_batch_size=8, max_queue_delay_us=5000), listener=recorder
    )

    def call(x: int) -> int:
        with batcher.incoming():
            future = batcher.submit(x)
        result: int = future.result(timeout=10)
        return result

    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(call, range(2000)))
    batcher.close()
    assert results == [2 * x for x in range(2000)]
    assert sum(recorder.sizes) == 2000
    assert max(recorder.sizes) > 1, "concurrent requests must share batches"


def test_preserve_ordering_across_instances() -> None:
    release_first = threading.Event()
    started = threading.Event()

    def slow(batch: Sequence[int]) -> list[int]:
        if 0 in batch:
            started.set()
            release_first.wait(10)
        return list(batch)

    batcher = DynamicBatcher([slow, slow], BatchPolicy(max_batch_size=1, preserve_ordering=True))
    first = batcher.submit(0)
    assert started.wait(10)
    second = batcher.submit(1)
    with pytest.raises(TimeoutError):
        second.result(timeout=0.2)  # done on the other instance, but held back behind 0
    release_first.set()
    assert (first.result(timeout=10), second.result(timeout=10)) == (0, 1)
    batcher.close()


def test_close_runs_every_queued_request_then_refuses() -> None:
    batcher = DynamicBatcher(double, BatchPolicy(max_batch_size=2))
    futures = [batcher.submit(x) for x in range(5)]
    batcher.close()
    assert [f.result(timeout=5) for f in futures] == [0, 2, 4, 6, 8]
    with pytest.raises(OverloadedError, match="shutting down"):
        batcher.submit(1)


def test_a_cancelled_request_does_not_stall_ordered_results() -> None:
    batcher, _, _ = manual(BatchPolicy(max_batch_size=4, preserve_ordering=True))
    first = batcher.submit(1)
    second = batcher.submit(2)
    assert first.cancel()
    drain(batcher)
    assert second.result(timeout=1) == 4


def test_a_request_that_cannot_be_answered_before_its_deadline_is_refused() -> None:
    batcher, clock, _ = manual(BatchPolicy(max_batch_size=1))

    def slow(batch: Sequence[Any]) -> list[Any]:
        clock.advance(0.1)
        return double(batch)

    for _ in range(60):  # the moving batch duration settles near 100 ms
        batcher.submit(0)
        drain(batcher, run=slow)
    for x in range(3):
        batcher.submit(x)
    with pytest.raises(OverloadedError, match="cannot answer this request within its deadline"):
        batcher.submit(9, deadline=clock.now + 0.2)  # four calls ahead of its answer
    assert batcher.submit(9, deadline=clock.now + 1.0) is not None
    assert len(drain(batcher, run=slow)) == 4


def test_a_call_stuck_past_its_deadline_is_lost_until_it_returns() -> None:
    clock, started, release = Clock(), threading.Event(), threading.Event()

    def stuck(batch: Sequence[Any]) -> list[Any]:
        started.set()
        release.wait(30)
        return double(batch)

    batcher = DynamicBatcher(stuck, BatchPolicy(max_batch_size=1), clock=clock)
    first = batcher.submit(1, deadline=clock.now + 1)
    assert started.wait(30)
    assert batcher.newly_lost(margin_s=2) == []
    clock.advance(3.5)  # 2.5 s past the deadline
    assert batcher.newly_lost(margin_s=2) == [0]
    assert batcher.newly_lost(margin_s=2) == []  # counted once
    assert batcher.wedged
    with pytest.raises(ModelNotReadyError, match="stuck in predict"):
        batcher.submit(2)
    release.set()
    assert first.result(timeout=30) == 2
    batcher.close()
    assert not batcher.wedged


def test_close_does_not_wait_for_a_lost_call() -> None:
    clock, started, release = Clock(), threading.Event(), threading.Event()

    def stuck(batch: Sequence[Any]) -> list[Any]:
        started.set()
        release.wait(30)
        return double(batch)

    batcher = DynamicBatcher(stuck, BatchPolicy(max_batch_size=1), clock=clock)
    batcher.submit(1, deadline=clock.now + 1)
    assert started.wait(30)
    clock.advance(10)
    assert batcher.newly_lost(margin_s=1) == [0]
    batcher.close(timeout_s=30)  # returns at once: nobody waits for the stuck thread
    release.set()
