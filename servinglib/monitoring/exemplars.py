"""Exemplars on the latency histogram: the trace id of a sampled request on its bucket.

prometheus_client keeps no exemplars in multiprocess mode (its ``.db`` files hold values
only), so servinglib keeps them itself. Each worker holds the newest exemplar per
(histogram, labels, bucket) in memory, at most :data:`MAX_EXEMPLARS` of them, and writes
them to its own file ``exemplars/<pid>.json`` in ``PROMETHEUS_MULTIPROC_DIR`` at most every
:data:`FLUSH_INTERVAL_S`, from one writer thread per process (written under a temporary
name, then renamed: a reader never sees half a file). The thread starts with the first
exemplar and waits for the next: recording never starts a thread, whose start would hold
the event loop until the new thread runs. A scrape that asks for OpenMetrics
(``Accept: application/openmetrics-text``) merges the newest exemplar per bucket over every
worker's file into the bucket samples; the Prometheus text format has no exemplars and is
left as it was. An exited worker's file is removed with its gauges
(:func:`remove_worker`), and the directory is emptied at start.

Only sampled requests have a trace id: with tracing off nothing is recorded or written.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Exemplar

__all__ = [
    "EXEMPLAR_DIR",
    "FLUSH_INTERVAL_S",
    "MAX_EXEMPLARS",
    "ExemplarStore",
    "remove_worker",
    "with_exemplars",
]

log = logging.getLogger("servinglib.monitoring.exemplars")

EXEMPLAR_DIR = "exemplars"
FLUSH_INTERVAL_S = 0.5
MAX_EXEMPLARS = 2000  # histograms x label sets x buckets; the least recently seen go first

Labels = tuple[tuple[str, str], ...]
Key = tuple[str, Labels, float]  # histogram name, its labels (sorted), bucket upper bound
Entry = tuple[str, float, float]  # trace id, observed value, Unix time


class ExemplarStore:
    """The newest exemplar per histogram bucket of this process, shared with the others
    through a file in ``directory()`` (None: kept in memory only, one process).

    Example::

        store = ExemplarStore(lambda: os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        store.record("servinglib_request_duration_seconds", {"model": "m"}, bounds, 0.02, tid)
    """

    def __init__(
        self,
        directory: Callable[[], str | None],
        interval_s: float = FLUSH_INTERVAL_S,
        limit: int = MAX_EXEMPLARS,
    ) -> None:
        self._directory = directory
        self._interval_s = interval_s
        self._limit = limit
        self._entries: dict[Key, Entry] = {}
        self._lock = threading.Lock()
        self._changed = threading.Event()  # set: entries not yet written
        self._writer_pid = 0  # the process whose writer thread runs (none after a fork)
        self._written_at = 0.0

    def record(
        self,
        metric: str,
        labels: Mapping[str, str],
        bounds: Sequence[float],
        value: float,
        trace_id: str,
    ) -> None:
        """Keep ``trace_id`` as the exemplar of the bucket of ``bounds`` (ascending, ending
        with +Inf) that ``value`` falls in; schedule the write of this process's file."""
        bound = bounds[min(bisect.bisect_left(bounds, value), len(bounds) - 1)]
        key = (metric, tuple(sorted(labels.items())), bound)
        with self._lock:
            self._entries.pop(key, None)  # re-inserted last: insertion order is recency
            self._entries[key] = (trace_id, value, time.time())
            if len(self._entries) > self._limit:
                del self._entries[next(iter(self._entries))]
            if self._writer_pid != os.getpid() and self._directory():
                self._writer_pid = os.getpid()  # a forked worker starts a writer of its own
                threading.Thread(target=self._writes, name="exemplars", daemon=True).start()
        if not self._changed.is_set():
            self._changed.set()

    def _writes(self) -> None:
        """The writer thread: this process's file, at most every ``interval_s``."""
        while True:
            self._changed.wait()
            wait = self._interval_s - (time.monotonic() - self._written_at)
            if wait > 0:
                time.sleep(wait)  # what arrives meanwhile goes in the same write
            self._changed.clear()
            self._write()

    def snapshot(self) -> dict[Key, Entry]:
        """This process's exemplars."""
        with self._lock:
            return dict(self._entries)

    def merged(self) -> dict[Key, Entry]:
        """The newest exemplar per bucket over every worker's file and this process."""
        merged: dict[Key, Entry] = {}
        directory = self._directory()
        if directory:
            for path in (Path(directory) / EXEMPLAR_DIR).glob("*.json"):
                _newest(merged, _read(path))
        _newest(merged, self.snapshot().items())
        return merged

    def _write(self) -> None:
        with self._lock:
            self._written_at = time.monotonic()
            entries = [
                [m, labels, bound, *entry] for (m, labels, bound), entry in self._entries.items()
            ]
        directory = self._directory()
        if not directory:
            return
        folder = Path(directory) / EXEMPLAR_DIR
        target = folder / f"{os.getpid()}.json"
        staging = target.with_suffix(".tmp")
        try:
            folder.mkdir(exist_ok=True)
            staging.write_text(json.dumps({"exemplars": entries}))
            os.replace(staging, target)
        except OSError as e:
            log.warning("could not write the exemplars of this worker to %s: %s", target, e)


def remove_worker(directory: str, pid: int) -> None:
    """Drop the exemplars of an exited worker (gunicorn's ``child_exit``)."""
    for suffix in (".json", ".tmp"):
        (Path(directory) / EXEMPLAR_DIR / f"{pid}{suffix}").unlink(missing_ok=True)


def with_exemplars(families: Iterable[Metric], exemplars: Mapping[Key, Entry]) -> Iterator[Metric]:
    """``families`` with each histogram bucket sample carrying its exemplar, if any."""
    wanted = {metric for metric, _, _ in exemplars}
    for family in families:
        if family.type == "histogram" and family.name in wanted:
            family.samples = [_annotated(family.name, s, exemplars) for s in family.samples]
        yield family


def _annotated(metric: str, sample: Any, exemplars: Mapping[Key, Entry]) -> Any:
    if not sample.name.endswith("_bucket") or "le" not in sample.labels:
        return sample
    labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
    entry = exemplars.get((metric, labels, float(sample.labels["le"])))
    if entry is None:
        return sample
    trace_id, value, timestamp = entry
    return sample._replace(exemplar=Exemplar({"trace_id": trace_id}, value, timestamp))


def _read(path: Path) -> Iterator[tuple[Key, Entry]]:
    """The exemplars of one worker's file (none when it vanished or is not ours)."""
    try:
        rows = json.loads(path.read_text())["exemplars"]
        for metric, labels, bound, trace_id, value, timestamp in rows:
            key = (str(metric), tuple((str(k), str(v)) for k, v in labels), float(bound))
            yield key, (str(trace_id), float(value), float(timestamp))
    except (OSError, ValueError, KeyError, TypeError):
        return  # a worker exiting removed it, or a stray file: skip it


def _newest(merged: dict[Key, Entry], entries: Iterable[tuple[Key, Entry]]) -> None:
    for key, entry in entries:
        kept = merged.get(key)
        if kept is None or kept[2] < entry[2]:
            merged[key] = entry
