"""``servinglib_model_sync_*``: the store sync of URL repositories, as Prometheus metrics.

The gunicorn master polls the stores and writes each model's outcome to one status file;
every worker exposes that file on scrape, so any worker answers the same figures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["MODEL_SYNC_METRICS", "ModelSyncCollector"]

# (name, type, status key, description), labelled by `model`.
MODEL_SYNC_METRICS = (
    (
        "servinglib_model_sync_up",
        "gauge",
        "ok",
        "1 when the last poll of the model's store succeeded, 0 while it fails.",
    ),
    (
        "servinglib_model_sync_consecutive_failures",
        "gauge",
        "failures",
        "Failed polls of the store in a row (retried with exponential backoff).",
    ),
    (
        "servinglib_model_sync_last_success_timestamp_seconds",
        "gauge",
        "last_success_unix",
        "Unix time of the last successful poll of the store.",
    ),
    ("servinglib_model_sync_polls", "counter", "polls", "Polls of the store since the start."),
    (
        "servinglib_model_sync_downloads",
        "counter",
        "downloads",
        "Versions the polls downloaded into the cache (not those of the start-up sync).",
    ),
)


class ModelSyncCollector(Collector):
    """Gauges and counters of the master's last store polls, per model."""

    def __init__(self, status: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        self._status = status

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """One sample per metric and model with a URL repository."""
        status = self._status()
        for name, kind, key, documentation in MODEL_SYNC_METRICS:
            family = (GaugeMetricFamily if kind == "gauge" else CounterMetricFamily)(
                name, documentation, labels=["model"]
            )
            for model, state in status.items():
                family.add_metric([model], float(state.get(key) or 0))
            yield family
