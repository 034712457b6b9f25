"""Live counts: binning, quality issues, the sliding window, and sums over worker tables."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from servinglib.monitoring.drift import (
    DriftMonitor,
    Profile,
    VersionMonitor,
    WindowSpec,
    build_profile,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def reference(count: int = 4000, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [{"x": float(rng.normal()), "city": ["paris", "lyon"][i % 2]} for i in range(count)]


def profile(window: WindowSpec | None = None) -> Profile:
    return build_profile(
        [(r, {"score": r["x"] * 2}) for r in reference()], window or WindowSpec(60, 6)
    )


def fields(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in report["fields"]}


def test_every_quality_issue_is_counted_and_reported() -> None:
    issues: list[tuple[str, str]] = []

    def on_issue(field: str, issue: str, count: int) -> None:
        issues.extend([(field, issue)] * count)

    monitor = VersionMonitor("m", "1", profile(), None, on_issue, Clock())
    monitor.observe({"x": 0.1, "city": "paris"}, {"score": 0.2})
    monitor.observe({"city": "tokyo"}, {"score": 99.0})  # missing x, new city, score out of range
    monitor.observe({"x": "high", "city": None, "extra": 1}, None)  # wrong type, missing city
    report = monitor.report()
    by_name = fields(report)
    assert report["requests"] == 3
    assert report["unprofiled_requests"] == 1
    assert by_name["x"]["quality"] == {
        "missing": 1,
        "out_of_range": 0,
        "unseen_category": 0,
        "wrong_type": 1,
    }
    assert by_name["city"]["quality"]["unseen_category"] == 1
    assert by_name["city"]["quality"]["missing"] == 1
    assert by_name["city"]["bins"]["live"] == [1, 0, 1]  # paris, lyon, other
    assert by_name["score"]["quality"]["out_of_range"] == 1
    assert by_name["score"]["quality"]["missing"] == 1
    assert sorted(issues) == sorted(
        [
            ("x", "missing"),
            ("city", "unseen_category"),
            ("score", "out_of_range"),
            ("x", "wrong_type"),
            ("city", "missing"),
            ("score", "missing"),
        ]
    )


def test_unknown_fields_are_found_whatever_else_the_request_holds() -> None:
    monitor = VersionMonitor("m", "1", profile(), None, clock=Clock())
    monitor.observe({"x": 0.1, "city": "paris"}, {"score": 0.2})  # known fields only
    monitor.observe({"city": "paris", "extra": 1}, {"score": 0.2})  # as many keys, one unknown
    monitor.observe({"x": None, "city": "lyon"}, {"score": 0.2})  # an explicit null
    monitor.observe({"x": 0.3, "city": "lyon"}, {"score": 0.1, "note": "x"})  # unknown output
    report = monitor.report()
    assert report["requests"] == 4
    assert report["unprofiled_requests"] == 2
    assert fields(report)["x"]["quality"]["missing"] == 2


def test_counts_leave_the_window_as_time_passes() -> None:
    clock = Clock()
    monitor = VersionMonitor("m", "1", profile(WindowSpec(60, 6)), None, clock=clock)
    for row in reference(100, seed=1):
        monitor.observe(row, None)
    monitor.flush()  # counts land in the slot of the flush that bins them
    clock.now += 30
    for row in reference(50, seed=2):
        monitor.observe(row, None)
    assert monitor.report()["requests"] == 150
    clock.now += 40  # the first batch is now 70 s old: outside a 60 s window
    assert monitor.report()["requests"] == 50
    clock.now += 60
    report = monitor.report()
    assert report["requests"] == 0
    assert fields(report)["x"]["psi"] is None


def test_a_request_cap_keeps_only_the_newest_slots() -> None:
    clock = Clock()
    monitor = VersionMonitor("m", "1", profile(WindowSpec(60, 6, requests=100)), None, clock=clock)
    for _ in range(3):
        for row in reference(80, seed=3):
            monitor.observe(row, None)
        monitor.flush()
        clock.now += 10
    report = monitor.report()
    assert report["requests"] == 160  # the two newest slots: the first to reach 100
    assert report["window"]["slots_used"] == 2


def test_in_distribution_stays_low_and_a_shift_scores_high() -> None:
    monitor = VersionMonitor("m", "1", profile(), None, clock=Clock())
    shifted = VersionMonitor("m", "2", profile(), None, clock=Clock())
    for row in reference(1000, seed=4):
        monitor.observe(row, {"score": row["x"] * 2})
        shifted.observe({**row, "x": row["x"] + 1}, None)
    assert all(f["psi"] < 0.1 for f in monitor.report()["fields"])
    assert fields(shifted.report())["x"]["psi"] > 0.25
    assert fields(shifted.report())["city"]["psi"] < 0.1


def _worker(directory: str, rows: list[dict[str, Any]], done: Any) -> None:
    monitor = VersionMonitor("m", "1", profile(), directory, clock=lambda: 1_000_000.0)
    for row in rows:
        monitor.observe(row, None)
    monitor.flush()  # what the drift monitor's thread does a few times a second
    done.put(os.getpid())


def test_the_window_sums_every_process_table(tmp_path: Path) -> None:
    rows = [{**r, "x": r["x"] + 0.5} for r in reference(600, seed=5)]
    # spawn, not fork: a fork of this multi-threaded test process can inherit a lock held
    # by another thread and hang
    context = multiprocessing.get_context("spawn")
    done = context.Queue()
    workers = [
        context.Process(target=_worker, args=(str(tmp_path), part, done))
        for part in (rows[:200], rows[200:])
    ]
    for process in workers:
        process.start()
    for process in workers:
        process.join(120)
        assert process.exitcode == 0, f"worker {process.pid} exit code {process.exitcode}"
    split = VersionMonitor("m", "1", profile(), str(tmp_path), clock=lambda: 1_000_000.0)
    alone = VersionMonitor("m", "1", profile(), None, clock=lambda: 1_000_000.0)
    for row in rows:
        alone.observe(row, None)
    report, single = split.report(), alone.report()
    assert (report["requests"], report["workers"]) == (600, 2)
    assert report["fields"] == single["fields"]
    assert len(list((tmp_path / "drift" / "m" / "1").glob("*.counts"))) == 3


@pytest.mark.parametrize("value", [{"nested": 1}, [1, "a"], float("nan"), np.float32(0.5)])
def test_odd_values_never_raise(value: Any) -> None:
    monitor = VersionMonitor("m", "1", profile(), None, clock=Clock())
    monitor.observe({"x": value, "city": value}, value)
    assert monitor.report()["requests"] == 1


def test_fast_paths_agree_with_the_general_one() -> None:
    vectors = build_profile(
        [({"v": [float(i % 7), 1.0, 2.0]}, None) for i in range(500)], WindowSpec(60, 6)
    )
    monitor = VersionMonitor("m", "1", vectors, None, clock=Clock())
    monitor.observe({"v": [3.0, 1.0, 2.0]}, None)  # list: the fast path
    monitor.observe({"v": np.array([3.0, 1.0, 2.0])}, None)  # array: the general path
    monitor.observe({"v": [3.0, "x", 2.0]}, None)
    (field,) = monitor.report()["fields"]
    assert field["kind"] == "norm"
    assert sorted(field["bins"]["live"], reverse=True)[:2] == [2, 0]
    assert field["quality"]["wrong_type"] == 1
    numbers = VersionMonitor("m", "2", profile(), None, clock=Clock())
    for x in (float("nan"), float("inf"), True, 0.5, 1):
        numbers.observe({"x": x, "city": "paris"}, None)
    quality = fields(numbers.report())["x"]["quality"]
    assert (quality["missing"], quality["wrong_type"]) == (2, 1)
    assert fields(numbers.report())["x"]["samples"] == 2


class OneVersion:
    """Model ``m`` version ``1`` in ``path`` (what the registry tells the drift monitor)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def model_names(self) -> list[str]:
        return ["m"]

    def records(self, model: str) -> list[Any]:
        return [SimpleNamespace(version="1", path=self.path)]


def test_the_background_thread_bins_queued_requests(tmp_path: Path) -> None:
    profile().save(tmp_path / "profile.json")
    counted: list[tuple[str, str, str, str, int]] = []
    done = threading.Event()

    def on_issue(*issue: Any) -> None:
        counted.append(issue)
        done.set()

    monitor = DriftMonitor(OneVersion(tmp_path), None, on_issue=on_issue, flush_seconds=0.01)
    try:
        for _ in range(5):
            monitor.observe("m", "1", {"x": 0.1, "city": "tokyo"}, {"score": 0.2})
        monitor.observe("m", "2", {"x": 0.1}, None)  # no profile: not counted
        deadline = time.monotonic() + 30
        while sum(c[-1] for c in counted) < 5:  # no report asked: only the thread bins
            assert time.monotonic() < deadline, f"the queue was never binned: {counted}"
            done.wait(1)
            done.clear()
        assert {c[:4] for c in counted} == {("m", "1", "city", "unseen_category")}
    finally:
        monitor.close()
    report = monitor.report("m", "1")
    assert report is not None
    assert report["requests"] == 5
    assert monitor.report("m", "2") is None


def test_close_bins_what_is_still_queued(tmp_path: Path) -> None:
    profile().save(tmp_path / "profile.json")
    counted: list[tuple[str, str, str, str, int]] = []
    monitor = DriftMonitor(
        OneVersion(tmp_path), None, on_issue=lambda *i: counted.append(i), flush_seconds=3600
    )
    for _ in range(7):
        monitor.observe("m", "1", {"x": 0.1, "city": "tokyo"}, {"score": 0.2})
    assert counted == []  # queued: the thread waits an hour between flushes
    monitor.close()
    assert counted == [("m", "1", "city", "unseen_category", 7)]
    report = monitor.report("m", "1")
    assert report is not None
    assert report["requests"] == 7


def _quality(report: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {f["name"]: f["quality"] for f in report["fields"] if f["role"] == "feature"}


def test_open_inference_tensors_count_as_the_features_they_carry() -> None:
    """Named one-element tensors ([1], [1, 1], BYTES) are the features of the same name."""
    clock = Clock()
    monitor = VersionMonitor("m", "1", profile(), None, clock=clock)
    for row in reference(200):  # rows of the reference itself: none out of range
        tensors = {
            "x": np.array([[row["x"]]]),
            "city": np.array([row["city"].encode()], dtype=np.object_),
        }
        monitor.observe(tensors, {"score": np.array([row["x"] * 2])}, tensors=True)
    report = monitor.report()
    assert report["requests"] == 200
    assert report["unprofiled_requests"] == 0
    assert all(not any(q.values()) for q in _quality(report).values()), _quality(report)
    assert {f["name"]: f["samples"] for f in report["fields"]} == {
        "x": 200,
        "city": 200,
        "score": 200,
    }
    assert all(f["psi"] < 0.25 for f in report["fields"])


def test_one_tensor_of_one_row_holds_the_features_by_position() -> None:
    """``[1, N]`` (how KServe's and Triton's clients send a table row): feature i is element i."""
    rng = np.random.default_rng(0)
    rows = [
        {"a": float(rng.normal()), "b": float(rng.normal(5, 2)), "c": float(i % 3)}
        for i in range(2000)
    ]
    version = VersionMonitor(
        "m", "1", build_profile([(r, None) for r in rows]), None, clock=Clock()
    )
    for row in rows[:300]:
        version.observe({"input-0": np.array([[row["a"], row["b"], row["c"]]])}, None, tensors=True)
    report = version.report()
    assert report["unprofiled_requests"] == 0
    assert all(not any(q.values()) for q in _quality(report).values()), _quality(report)
    assert all(f["samples"] == 300 and f["psi"] < 0.1 for f in report["fields"]), report["fields"]
    untold = VersionMonitor("m", "1", build_profile([(r, None) for r in rows]), None, clock=Clock())
    untold.observe({"input-0": np.array([[1.0, 5.0, 0.0]])}, None)  # not said to be tensors
    assert untold.report()["unprofiled_requests"] == 1  # an unknown field; every feature missing
