"""A worker forked while the master writes a metric starts with working metrics."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

# In its own interpreter: multiprocess mode is chosen when prometheus_client is imported.
CHILDREN = textwrap.dedent(
    """
    import os, sys, threading, time
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = sys.argv[1]
    from servinglib.monitoring.metrics import ServingMetrics

    metrics = ServingMetrics()
    stop = threading.Event()

    def decide():  # what the rollout controller does in the master
        i = 0
        while not stop.is_set():
            metrics.rollout_decided("m", str(i % 50), "advance", i % 3)
            i += 1

    threading.Thread(target=decide, daemon=True).start()
    hung = 0
    for _ in range(25):
        pid = os.fork()
        if pid == 0:  # a worker's first metric
            metrics.observe_request("m", "1", "http", "success", 0.01)
            os._exit(0)
        deadline = time.monotonic() + 20
        while not os.waitpid(pid, os.WNOHANG)[0]:
            if time.monotonic() > deadline:
                hung += 1
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                break
            time.sleep(0.002)
    stop.set()
    print(hung)
    """
)


def test_a_child_forked_during_a_master_metric_write_does_not_hang(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHILDREN, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    assert result.stdout.strip() == "0", result.stdout + result.stderr
