"""The shadows' CPU budget: a token bucket, and the router shedding copies once it is spent."""

from __future__ import annotations

from pathlib import Path

from servinglib.shadow.budget import CpuBudget
from servinglib.shadow.copies import ShadowCopy
from servinglib.shadow.router import ShadowRouter
from tests.unit.test_shadow import Recorder, registry_with


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_bucket_admits_until_spent_and_refills_at_the_share() -> None:
    clock = Clock()
    budget = CpuBudget(0.1, window_s=1.0, clock=clock)
    assert budget.admit()
    budget.spend(0.05)
    assert budget.admit()  # 50 ms of the 100 ms left
    budget.spend(0.25)  # a long copy leaves the bucket 200 ms short
    assert not budget.admit()
    clock.now += 1.9  # 190 ms paid back: still 10 ms short
    assert not budget.admit()
    clock.now += 0.2
    assert budget.admit()


def test_an_idle_bucket_holds_one_window_at_most() -> None:
    clock = Clock()
    budget = CpuBudget(0.1, window_s=1.0, clock=clock)
    clock.now += 3600  # an idle hour saves no more than 100 ms
    budget.spend(0.1)
    assert not budget.admit()


class SheddingRecorder(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.shed: list[str] = []

    def shadow_shed(self, model: str, primary: str, shadow: str) -> None:
        self.shed.append(shadow)


def test_copies_beyond_the_budget_are_shed_and_counted(tmp_path: Path) -> None:
    registry = registry_with(  # version 3 sleeps 20 ms per copy (its wall time is counted)
        tmp_path,
        "      - {version: '3'}\n",
        "shadow_executor: {max_concurrency: 1, max_queue: 0, max_cpu_share: 0.1}\n",
    )
    recorder = SheddingRecorder()
    router = ShadowRouter(registry, listener=recorder)
    admitted = 0
    for x in range(1, 51):  # one at a time: each copy finishes before the next is offered
        shed = len(recorder.shed)
        router.submit(ShadowCopy("scorer", "1", {"x": x}, {"score": 2.0 * x}, f"r{x}"))
        if len(recorder.shed) == shed:
            admitted += 1
            recorder.wait_for(admitted)
    router.close()
    # 100 ms per second against copies of 20 ms offered back to back: most are shed.
    assert len(recorder.finished) + len(recorder.shed) == 50
    assert recorder.dropped == 0
    assert len(recorder.finished) >= 1
    assert len(recorder.shed) >= 25, (len(recorder.shed), len(recorder.finished))
    assert set(recorder.shed) == {"3"}
