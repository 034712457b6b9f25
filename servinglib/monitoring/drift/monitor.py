"""The server's drift monitor: one :class:`VersionMonitor` per profiled version.

A version is monitored when its directory holds ``profile.json``; the profile is read the
first time the version answers (so versions loaded later by a rollout are covered too).
The monitor is also a Prometheus collector: each scrape computes PSI and Jensen-Shannon
distance per field from the window of every worker's counts.

Answered requests are queued and binned in bulk by a background thread every
:data:`FLUSH_SECONDS` (and by any report, for this process's queue), so a worker's counts
reach the other workers' reports at most that much later.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from servinglib.monitoring.drift.profile import Profile, ProfileError, default_profile_path
from servinglib.monitoring.drift.version import VersionMonitor

__all__ = ["DRIFT_GAUGES", "FLUSH_SECONDS", "DriftMonitor", "VersionDirectories"]

log = logging.getLogger("servinglib.monitoring.drift")

FLUSH_SECONDS = 0.25  # how often queued requests are binned

# (name, documentation) of the gauges each scrape computes; the metrics reference lists them.
DRIFT_GAUGES = (
    (
        "servinglib_drift_psi",
        "Population stability index of a feature or output over the drift window, against "
        "the version's reference profile (< 0.1 stable, > 0.25 drifted).",
    ),
    (
        "servinglib_drift_js_distance",
        "Jensen-Shannon distance (base 2, 0 to 1) of a feature or output over the drift "
        "window, against the version's reference profile.",
    ),
    (
        "servinglib_drift_window_requests",
        "Requests of a version counted in the drift window, summed over every worker.",
    ),
    (
        "servinglib_drift_output_window_answers",
        "Answers in the drift window per output and bin, on the output's own bins from the "
        "reference profile (label bin: the bin's upper edge, +Inf, or the category).",
    ),
)


class VersionDirectories(Protocol):
    """Where versions live (the model registry)."""

    def model_names(self) -> list[str]:
        """Every configured model."""

    def records(self, model: str) -> list[Any]:
        """Records with ``.version`` and ``.path``."""


class DriftMonitor(Collector):
    """Observe answered requests of profiled versions; report and export drift.

    Example::

        monitor = DriftMonitor(registry, directory=multiprocess_dir())
        monitor.observe("eta", "3", {"distance_km": 2.0}, {"eta_s": 300.0})
        monitor.report("eta", "3")["fields"][0]["psi"]
        monitor.close()
    """

    def __init__(
        self,
        versions: VersionDirectories,
        directory: str | None,
        on_issue: Callable[[str, str, str, str, int], None] | None = None,
        clock: Callable[[], float] = time.time,
        flush_seconds: float = FLUSH_SECONDS,
    ) -> None:
        self._versions = versions
        self._directory = directory
        self._on_issue = on_issue
        self._clock = clock
        self._flush_seconds = flush_seconds
        self._monitors: dict[tuple[str, str], VersionMonitor | None] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._failed = False

    def observe(
        self, model: str, version: str, features: Any, output: Any, tensors: bool = False
    ) -> None:
        """Queue one answered request; versions without a profile cost one dict lookup.

        ``tensors``: ``features`` are Open Inference tensors, mapped to profiled features.
        """
        try:
            monitor = self._monitors[model, version]
        except KeyError:
            monitor = self._monitor(model, version)
        if monitor is not None:
            monitor.observe(features, output, tensors)

    def flush(self) -> None:
        """Bin every version's queued requests now (the background thread does it anyway)."""
        for key, monitor in list(self._monitors.items()):
            if monitor is not None:
                try:
                    monitor.flush()
                except Exception:  # monitoring must never take the server down
                    if not self._failed:
                        self._failed = True
                        log.exception("drift monitoring of model %r version %r failed", *key)

    def close(self) -> None:
        """Stop the background thread and bin what is still queued."""
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        self.flush()

    def _flush_forever(self) -> None:
        while not self._stop.wait(self._flush_seconds):
            self.flush()

    def report(self, model: str, version: str) -> dict[str, Any] | None:
        """The version's drift JSON, or None when it has no profile."""
        monitor = self._monitor(model, version)
        return None if monitor is None else monitor.report()

    def _monitor(self, model: str, version: str) -> VersionMonitor | None:
        key = (model, version)
        if key in self._monitors:
            return self._monitors[key]
        with self._lock:
            if key not in self._monitors:
                self._monitors[key] = monitor = self._open(model, version)
                if monitor is not None and self._flusher is None and not self._stop.is_set():
                    self._flusher = threading.Thread(
                        target=self._flush_forever, name="servinglib-drift", daemon=True
                    )
                    self._flusher.start()
        return self._monitors[key]

    def _open(self, model: str, version: str) -> VersionMonitor | None:
        path = self._profile_path(model, version)
        if path is None or not path.is_file():
            return None
        try:
            profile = Profile.load(path)
        except ProfileError as e:
            log.error("drift monitoring off for model %r version %r: %s", model, version, e)
            return None
        on_issue = None
        if self._on_issue is not None:
            report = self._on_issue

            def on_issue(field: str, issue: str, count: int) -> None:
                report(model, version, field, issue, count)

        return VersionMonitor(model, version, profile, self._directory, on_issue, self._clock)

    def _profile_path(self, model: str, version: str) -> Path | None:
        if model not in self._versions.model_names():
            return None
        for record in self._versions.records(model):
            if record.version == version:
                return default_profile_path(Path(record.path))
        return None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Prometheus gauges: PSI and JS distance per field, requests in the window."""
        labels = ["model", "version", "field", "role"]
        (psi_name, psi_doc), (js_name, js_doc), (req_name, req_doc), (out_name, out_doc) = (
            DRIFT_GAUGES
        )
        psi = GaugeMetricFamily(psi_name, psi_doc, labels=labels)
        js = GaugeMetricFamily(js_name, js_doc, labels=labels)
        requests = GaugeMetricFamily(req_name, req_doc, labels=["model", "version"])
        outputs = GaugeMetricFamily(out_name, out_doc, labels=["model", "version", "output", "bin"])
        for model in self._versions.model_names():
            for record in self._versions.records(model):
                report = self.report(model, record.version)
                if report is None:
                    continue
                requests.add_metric([model, record.version], report["requests"])
                for field in report["fields"]:
                    values = [model, record.version, field["name"], field["role"]]
                    if field["psi"] is not None:
                        psi.add_metric(values, field["psi"])
                        js.add_metric(values, field["js_distance"])
                    if field["role"] == "output":
                        bins = field["bins"]
                        names = (
                            bins["categories"] + ["_other"]
                            if bins["categories"]
                            else [f"{edge:.6g}" for edge in bins["edges"]] + ["+Inf"]
                        )
                        for name, count in zip(names, bins["live"], strict=True):
                            outputs.add_metric([model, record.version, field["name"], name], count)
        yield from (psi, js, requests, outputs)
