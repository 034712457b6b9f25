"""Exemplars of the latency histogram: kept per bucket, shared between processes by file."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from servinglib.monitoring.exemplars import EXEMPLAR_DIR, ExemplarStore
from servinglib.monitoring.metrics import ServingMetrics, mark_worker_dead

LATENCY = "servinglib_request_duration_seconds"
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
BOUNDS = (0.01, 0.1, 1.0, math.inf)


def exemplars_of(body: bytes) -> dict[tuple[str, str], tuple[str, float]]:
    """``(model, le) -> (trace id, value)`` of every exemplar of the latency buckets."""
    found = {}
    for family in text_string_to_metric_families(body.decode()):  # type: ignore[no-untyped-call]
        for sample in family.samples:
            if sample.exemplar is not None:
                assert family.name == LATENCY
                assert sample.name == f"{LATENCY}_bucket"
                key = (sample.labels["model"], sample.labels["le"])
                found[key] = (sample.exemplar.labels["trace_id"], sample.exemplar.value)
    return found


def test_a_sampled_request_marks_the_bucket_its_latency_fell_in() -> None:
    metrics = ServingMetrics()
    metrics.observe_request("m", "1", "infer", "success", 0.0065, "a" * 32)
    metrics.observe_request("m", "1", "infer", "success", 0.006, "b" * 32)  # the newer wins
    metrics.observe_request("m", "1", "infer", "success", 0.3, "c" * 32)
    metrics.observe_request("m", "1", "infer", "success", 0.3)  # not sampled: no exemplar
    body, content_type = metrics.render(OPENMETRICS)
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    assert exemplars_of(body) == {("m", "0.007"): ("b" * 32, 0.006), ("m", "0.35"): ("c" * 32, 0.3)}
    # the Prometheus text format has none, and is what it was
    text, text_type = metrics.render("text/plain")
    assert text_type.startswith("text/plain")
    assert b" # {" not in text
    assert metrics.render() == (text, text_type)


_OTHER_WORKER = """
import os, sys, time
from pathlib import Path
from servinglib.monitoring.exemplars import EXEMPLAR_DIR, ExemplarStore
directory, trace_id = sys.argv[1:]
store = ExemplarStore(lambda: directory, interval_s=0.0)
store.record("servinglib_request_duration_seconds", {"model": "m"}, (0.01, 0.1, 1.0, float("inf")), 0.05, trace_id)
mine = Path(directory) / EXEMPLAR_DIR / f"{os.getpid()}.json"
deadline = time.monotonic() + 30
while not mine.exists():  # the timer thread writes it
    assert time.monotonic() < deadline
    time.sleep(0.01)
print(os.getpid())
"""


def test_another_worker_s_newer_exemplar_is_merged_and_goes_with_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = str(tmp_path)
    mine = ExemplarStore(lambda: directory)
    mine.record(LATENCY, {"model": "m"}, BOUNDS, 0.05, "1" * 32)
    mine.record(LATENCY, {"model": "m"}, BOUNDS, 0.5, "2" * 32)
    other = subprocess.run(
        [sys.executable, "-c", _OTHER_WORKER, directory, "3" * 32],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    merged = mine.merged()
    assert merged[(LATENCY, (("model", "m"),), 0.1)][0] == "3" * 32  # theirs, newer
    assert merged[(LATENCY, (("model", "m"),), 1.0)][0] == "2" * 32  # mine
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", directory)
    their_file = tmp_path / EXEMPLAR_DIR / f"{int(other.stdout)}.json"
    assert their_file.exists()
    mark_worker_dead(int(other.stdout))  # gunicorn's child_exit
    assert not their_file.exists()
    assert mine.merged()[(LATENCY, (("model", "m"),), 0.1)][0] == "1" * 32


def test_a_store_keeps_a_bounded_number_of_exemplars_least_recent_first_out() -> None:
    store = ExemplarStore(lambda: None, limit=3)
    for n in range(5):
        store.record(LATENCY, {"model": f"m{n}"}, BOUNDS, 0.5, f"{n:032x}")
    store.record(LATENCY, {"model": "m2"}, BOUNDS, 0.5, "f" * 32)  # seen again: kept
    store.record(LATENCY, {"model": "m5"}, BOUNDS, 0.5, "e" * 32)
    kept = {labels[0][1] for _, labels, _ in store.snapshot()}
    assert kept == {"m2", "m4", "m5"}


def test_a_value_past_every_bound_lands_in_the_inf_bucket_and_junk_files_are_skipped(
    tmp_path: Path,
) -> None:
    (tmp_path / EXEMPLAR_DIR).mkdir()
    (tmp_path / EXEMPLAR_DIR / "99.json").write_text("{not json")
    store = ExemplarStore(lambda: str(tmp_path))
    store.record(LATENCY, {"model": "m"}, BOUNDS, 12.0, "d" * 32)
    assert list(store.merged()) == [(LATENCY, (("model", "m"),), math.inf)]
