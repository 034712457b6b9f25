"""The server's own view of a run: ``/metrics`` read before and after, differenced.

``servinglib_request_duration_seconds`` is the time from request received to answer ready;
``servinglib_queue_time_seconds`` the part spent waiting in the dynamic batcher's queue; the
rest is compute (the model, the codec and the framework). ``servinglib_batch_size`` gives
the batches the batcher ran.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping

__all__ = ["Snapshot", "server_view", "snapshot"]

Snapshot = dict[str, float]  # "<sample name>" -> value summed over the model's label sets

_WANTED = {
    "servinglib_request_duration_seconds_sum": "request_s",
    "servinglib_request_duration_seconds_count": "requests",
    "servinglib_queue_time_seconds_sum": "queue_s",
    "servinglib_queue_time_seconds_count": "queued",
    "servinglib_batch_size_sum": "batched_rows",
    "servinglib_batch_size_count": "batches",
}


def snapshot(url: str, model: str) -> Snapshot:
    """The sums and counts of ``model``'s histograms now (empty if /metrics does not answer)."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:  # noqa: S310
            text = answer.read().decode()
    except (urllib.error.URLError, OSError):
        return {}
    from prometheus_client.parser import text_string_to_metric_families

    out: Snapshot = dict.fromkeys(_WANTED.values(), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = _WANTED.get(sample.name)
            if key is not None and sample.labels.get("model") == model:
                out[key] += sample.value
    return out


def server_view(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float | None]:
    """Mean server time, queue time and compute time per request (ms), mean batch size."""
    if not before or not after:
        return {"server_ms": None, "queue_ms": None, "compute_ms": None, "batch_size": None}
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    requests, queued, batches = delta["requests"], delta["queued"], delta["batches"]
    server_ms = 1000 * delta["request_s"] / requests if requests else None
    queue_ms = 1000 * delta["queue_s"] / queued if queued else (0.0 if requests else None)
    compute_ms = None if server_ms is None or queue_ms is None else max(0.0, server_ms - queue_ms)
    batch_size = delta["batched_rows"] / batches if batches else None
    return {
        "server_ms": server_ms,
        "queue_ms": queue_ms,
        "compute_ms": compute_ms,
        "batch_size": batch_size,
    }
