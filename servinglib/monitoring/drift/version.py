"""Live monitoring of one version: queue each answered request, bin the queue in bulk.

Answering a request costs one append to a queue; :meth:`VersionMonitor.flush` (called by
the drift monitor's background thread a few times a second, and before every report) bins
what has queued, one numpy pass per field, and adds the counts to the current time slot.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from itertools import repeat
from operator import is_not
from typing import Any

import numpy as np

from servinglib.monitoring.drift.binning import QUALITY_ISSUES, FieldBinner
from servinglib.monitoring.drift.profile import Profile
from servinglib.monitoring.drift.statistics import js_distance, psi
from servinglib.monitoring.drift.table import CountsTable, read_window, table_path, table_pattern
from servinglib.monitoring.drift.tensors import Tensors, tensor_features

__all__ = ["BATCH", "DRIFT_THRESHOLD", "QUALITY_ISSUES", "VersionMonitor"]

DRIFT_THRESHOLD = 0.25  # PSI above which a field is reported as drifted
# The request that fills a batch bins it: few enough queued requests that their memory stays
# in cache and hardly wakes the garbage collector (700 net new containers start a collection;
# a queued request holds two or three), enough that each numpy call is spread over many.
BATCH = 256


class VersionMonitor:
    """Counts one version's features and outputs on its profile's bins.

    Args:
        model, version: the version monitored.
        profile: its reference profile.
        directory: the multiprocess directory (None: this process only).
        on_issue: told ``(field, issue, count)`` for the data-quality problems of each flush
            (a counter).
        clock: wall time.
    """

    def __init__(
        self,
        model: str,
        version: str,
        profile: Profile,
        directory: str | None,
        on_issue: Callable[[str, str, int], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.model, self.version, self.profile = model, version, profile
        self._on_issue = on_issue
        self._clock = clock
        self._features: dict[str, FieldBinner] = {}
        self._outputs: dict[str, FieldBinner] = {}
        column = 0  # counts vector index (the table's column minus its slot column)
        for field in profile.fields:
            binner = FieldBinner(field, column)
            column += binner.width
            (self._features if field.role == "feature" else self._outputs)[field.name] = binner
        self._feature_names = [f.name for f in profile.fields if f.role == "feature"]
        self._requests_column = column
        self._unprofiled_column = column + 1
        self._width = column + 2
        self._queue: deque[tuple[Any, Any]] = deque()
        self._flushing = threading.Lock()
        encoded = json.dumps([asdict(f) for f in profile.fields], sort_keys=True).encode()
        self._fingerprint = hashlib.sha256(encoded).hexdigest()[:12]
        window = profile.window
        self._table = CountsTable(
            self._width,
            window.slots,
            window.slot_seconds,
            table_path(directory, model, version, self._fingerprint),
            clock,
        )

    def observe(self, features: Any, output: Any, tensors: bool = False) -> None:
        """Queue one answered request (an append; binned by the next :meth:`flush`).

        ``tensors``: ``features`` are Open Inference tensors, read as the profiled features
        they carry (:func:`~servinglib.monitoring.drift.tensors.tensor_features`).
        """
        queue = self._queue
        queue.append((Tensors(features) if tensors else features, output))
        if len(queue) >= BATCH:
            self.flush()

    def flush(self) -> None:
        """Bin every queued request and add the counts to the current time slot."""
        with self._flushing:
            queue = self._queue
            pending = [queue.popleft() for _ in range(len(queue))]  # appends may go on
            if not pending:
                return
            features, outputs = zip(*pending, strict=True)
            counts = np.zeros(self._width, dtype=np.int64)
            counts[self._requests_column] = len(pending)
            unprofiled: set[int] = set()
            for values, binners, default in (
                (features, self._features, "input"),
                (outputs, self._outputs, "output"),
            ):
                if binners:
                    if set(map(type, values)) == {dict}:  # the common case: no copies
                        present: Sequence[Mapping[str, Any]] = values
                    else:
                        names = self._feature_names
                        present = [_fields(v, default, names) for v in values]
                    columns = {name: list(map(_get, present, repeat(name))) for name in binners}
                    if _may_have_unknown_fields(present, columns.values()):
                        unprofiled.update(_unprofiled(present, binners))
                    for name, binner in binners.items():
                        binner.count(columns[name], counts)
            counts[self._unprofiled_column] = len(unprofiled)
            self._table.add(counts)
        if self._on_issue is not None:
            self._report_issues(counts)

    def _report_issues(self, counts: np.ndarray) -> None:
        assert self._on_issue is not None
        for binner in [*self._features.values(), *self._outputs.values()]:
            found = counts[binner.quality : binner.quality + len(QUALITY_ISSUES)]
            for issue, n in zip(QUALITY_ISSUES, found, strict=True):
                if n:
                    self._on_issue(binner.profile.name, issue, int(n))

    def report(self) -> dict[str, Any]:
        """Drift and data quality over the window, summed over every worker (JSON-ready)."""
        self.flush()
        window = self.profile.window
        counts = read_window(
            self._table,
            table_pattern(self._fingerprint),
            window.slots,
            window.slot_seconds,
            window.requests,
            self._requests_column + 1,
            self._clock(),
        )
        total = counts.counts
        fields = []
        for binner in [*self._features.values(), *self._outputs.values()]:
            field = binner.profile
            live = [int(c) for c in total[binner.offset : binner.quality]]
            quality = total[binner.quality : binner.quality + len(QUALITY_ISSUES)]
            score = psi(field.reference, live)
            fields.append(
                {
                    "name": field.name,
                    "role": field.role,
                    "kind": field.kind,
                    "samples": sum(live),
                    "psi": _rounded(score),
                    "js_distance": _rounded(js_distance(field.reference, live)),
                    "drifted": score is not None and score > DRIFT_THRESHOLD,
                    "quality": {k: int(v) for k, v in zip(QUALITY_ISSUES, quality, strict=True)},
                    "bins": {
                        "edges": list(field.edges),
                        "categories": list(field.categories),
                        "reference": [round(r, 6) for r in field.reference],
                        "live": live,
                    },
                }
            )
        return {
            "model": self.model,
            "version": self.version,
            "window": {
                "seconds": window.seconds,
                "slots": window.slots,
                "max_requests": window.requests,
                "slots_used": counts.slots,
            },
            "requests": int(total[self._requests_column]),
            "workers": counts.workers,
            "unprofiled_requests": int(total[self._unprofiled_column]),
            "drift_threshold": DRIFT_THRESHOLD,
            "fields": fields,
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _fields(value: Any, default: str, features: Sequence[str]) -> Mapping[str, Any]:
    """A request's features or answer as named fields (a bare value is one field)."""
    if type(value) is Tensors:
        return tensor_features(value, features)
    return value if isinstance(value, Mapping) else {default: value}


def _get(fields: Mapping[str, Any], name: str) -> Any:
    return fields.get(name)


def _may_have_unknown_fields(
    present: Sequence[Mapping[str, Any]], columns: Iterable[list[Any]]
) -> bool:
    """False when every key of every request is a profiled field (counted without a loop).

    The keys add up to at most the non-null profiled values only when no key is unknown.
    """
    keys = sum(map(len, present))
    return keys != sum(sum(map(is_not, column, repeat(None))) for column in columns)


def _unprofiled(
    present: Sequence[Mapping[str, Any]], binners: Mapping[str, FieldBinner]
) -> list[int]:
    """Indexes of the requests with a field the profile does not know."""
    known = binners.keys()
    return [i for i, fields in enumerate(present) if not fields.keys() <= known]
