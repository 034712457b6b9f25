"""servinglib.serving.watchdog: a hung call is counted lost, its version turns not ready, the
worker retires; other models keep answering. A real worker over the misbehaving model."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from servinglib.config.spec import load_config
from servinglib.errors import DeadlineExceededError, ModelNotReadyError
from servinglib.serving.assembly import build_worker
from servinglib.serving.service import InferenceRequest
from servinglib.serving.watchdog import resident_memory_bytes

FIXTURE = Path(__file__).parents[1] / "fixtures" / "reliability" / "servinglib.yaml"


def test_a_hung_call_wedges_only_its_version_and_retires_the_worker() -> None:
    retired = threading.Event()
    worker = build_worker(load_config(FIXTURE, environ={}), retire=retired.set)
    service = worker.service
    late: list[BaseException] = []

    def hang() -> None:
        try:
            service.infer(InferenceRequest("hanger", {"hang": True}))
        except DeadlineExceededError as e:
            late.append(e)

    started = time.monotonic()
    threading.Thread(target=hang, daemon=True).start()
    assert retired.wait(30), "the watchdog never retired the worker"
    assert 1.5 <= time.monotonic() - started < 30  # deadline 500 ms + margin 1 s
    assert late, "the hung request was answered 504 at its deadline"
    assert not worker.is_live()
    assert service.wedged() == [("hanger", "1")]
    assert not service.is_ready()
    with pytest.raises(ModelNotReadyError, match="stuck in predict"):
        service.infer(InferenceRequest("hanger", {}))
    assert service.infer(InferenceRequest("steady", {})).output == {"ok": True}
    text = worker.metrics.render()[0].decode()
    assert 'servinglib_lost_calls_total{model="hanger",version="1"} 1.0' in text
    assert "servinglib_worker_resident_memory_bytes " in text
    closing = time.monotonic()
    worker.close()  # never waits for the lost thread
    assert time.monotonic() - closing < 10


def test_resident_memory_is_read_from_proc() -> None:
    # in a fresh process: in this one, pages freed by earlier tests may stay resident and
    # be reused by the allocation, which then adds nothing to the resident set
    script = (
        "from servinglib.serving.watchdog import resident_memory_bytes as rss\n"
        "before = rss()\n"
        "kept = bytearray(64 << 20)\n"
        "kept[::4096] = b'x' * len(kept[::4096])  # touch every page\n"
        "print(before, rss())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).parents[2],  # this checkout's servinglib
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    before, after = map(int, done.stdout.split())
    assert before > 1 << 20  # a Python process holds megabytes
    assert after - before >= 60 << 20, done.stdout
    assert resident_memory_bytes() > 1 << 20  # and this process reads its own
