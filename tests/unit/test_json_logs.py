"""JSON logs: written off the request thread, none lost, in order per thread."""

from __future__ import annotations

import json
import logging
import sys

import pytest


def test_log_lines_from_many_threads_are_all_written_in_order_per_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lines are written by a background thread; flush_logs() waits for every queued line."""
    import io
    import threading

    from servinglib.monitoring.logs import configure_logging, flush_logs

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging("info")
    log = logging.getLogger("servinglib.test")

    def emit(thread: int) -> None:
        for i in range(250):
            log.info("line", extra={"emitter": thread, "i": i})

    threads = [threading.Thread(target=emit, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flush_logs()
    entries = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(entries) == 2000
    for t in range(8):
        assert [e["i"] for e in entries if e["emitter"] == t] == list(range(250))
