"""``servinglib_model_sync_*``: the store sync of URL repositories, as Prometheus metrics.

The gunicorn master polls the stores and writes each model's outcome to one status file;
every worker exposes that file on scrape, so any worker answers the same figures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["ModelSyncCollector"]


class ModelSyncCollector(Collector):
    """Gauges and counters of the master's last store polls, per model."""

    def __init__(self, status: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        self._status = status

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """One sample per model with a URL repository."""
        up = GaugeMetricFamily(
            "servinglib_model_sync_up",
            "1 when the last poll of the model's store succeeded, 0 while it fails",
            labels=["model"],
        )
        failures = GaugeMetricFamily(
            "servinglib_model_sync_consecutive_failures",
            "Failed polls of the store in a row (retried with exponential backoff)",
            labels=["model"],
        )
        last = GaugeMetricFamily(
            "servinglib_model_sync_last_success_timestamp_seconds",
            "Unix time of the last successful poll of the store",
            labels=["model"],
        )
        polls = CounterMetricFamily(
            "servinglib_model_sync_polls", "Polls of the store since the start", labels=["model"]
        )
        downloads = CounterMetricFamily(
            "servinglib_model_sync_downloads",
            "Versions downloaded into the cache by the polls",
            labels=["model"],
        )
        for model, state in self._status().items():
            up.add_metric([model], 1.0 if state.get("ok") else 0.0)
            failures.add_metric([model], float(state.get("failures", 0)))
            last.add_metric([model], float(state.get("last_success_unix", 0.0)))
            polls.add_metric([model], float(state.get("polls", 0)))
            downloads.add_metric([model], float(state.get("downloads", 0)))
        yield from (up, failures, last, polls, downloads)
