"""Batch-size histogram printed by the peers when BENCH_BATCH_STATS=1 (shared by both venvs)."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter

__all__ = ["BatchStats"]


class BatchStats:
    """Counts batch sizes and prints the histogram at most every ``interval`` seconds."""

    def __init__(self, interval: float = 2.0) -> None:
        self.enabled = os.environ.get("BENCH_BATCH_STATS", "") not in ("", "0")
        self.sizes: Counter[int] = Counter()
        self.interval = interval
        self.printed_at = time.monotonic()

    def add(self, size: int) -> None:
        if not self.enabled:
            return
        self.sizes[size] += 1
        now = time.monotonic()
        if now - self.printed_at >= self.interval:
            self.printed_at = now
            batches = sum(self.sizes.values())
            requests = sum(k * v for k, v in self.sizes.items())
            print(
                f"batch stats: {batches} batches, {requests} requests, "
                f"mean {requests / batches:.2f}, max {max(self.sizes)}, "
                f"sizes {dict(sorted(self.sizes.items()))}",
                file=sys.stderr,
                flush=True,
            )
