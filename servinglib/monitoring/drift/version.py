"""Live monitoring of one version: bin each answered request, report drift over the window."""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from servinglib.monitoring.drift.profile import FieldProfile, Profile, array_scalar, reduce_value
from servinglib.monitoring.drift.statistics import js_distance, psi
from servinglib.monitoring.drift.table import CountsTable, read_window, table_path, table_pattern

__all__ = ["DRIFT_THRESHOLD", "QUALITY_ISSUES", "VersionMonitor"]

QUALITY_ISSUES = ("missing", "out_of_range", "unseen_category", "wrong_type")
DRIFT_THRESHOLD = 0.25  # PSI above which a field is reported as drifted
_EXPECTED = {
    "numeric": "numeric",
    "text": "string",
    "categorical": "categorical",
    "length": "array",
    "norm": "array",
    "top_class": "array",
}


@dataclass(frozen=True)
class _Binner:
    """A field's precomputed binning: where its counts and quality counters start."""

    profile: FieldProfile
    offset: int  # first bin column
    quality: int  # first quality column
    edges: list[float]
    categories: dict[str, int]
    low: float  # the reference range; values outside it are counted as out_of_range
    high: float


class VersionMonitor:
    """Counts one version's features and outputs on its profile's bins.

    Args:
        model, version: the version monitored.
        profile: its reference profile.
        directory: the multiprocess directory (None: this process only).
        on_issue: told ``(field, issue)`` for each data-quality problem (a counter).
        clock: wall time.
    """

    def __init__(
        self,
        model: str,
        version: str,
        profile: Profile,
        directory: str | None,
        on_issue: Callable[[str, str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.model, self.version, self.profile = model, version, profile
        self._on_issue = on_issue
        self._clock = clock
        self._features: dict[str, _Binner] = {}
        self._outputs: dict[str, _Binner] = {}
        column = 1
        for field in profile.fields:
            binner = _Binner(
                field,
                column,
                column + field.bins,
                list(field.edges),
                {c: i for i, c in enumerate(field.categories)},
                -math.inf if field.minimum is None else field.minimum,
                math.inf if field.maximum is None else field.maximum,
            )
            column += field.bins + len(QUALITY_ISSUES)
            (self._features if field.role == "feature" else self._outputs)[field.name] = binner
        self._requests_column = column
        self._unprofiled_column = column + 1
        encoded = json.dumps([asdict(f) for f in profile.fields], sort_keys=True).encode()
        self._fingerprint = hashlib.sha256(encoded).hexdigest()[:12]
        window = profile.window
        self._table = CountsTable(
            column + 1,
            window.slots,
            window.slot_seconds,
            table_path(directory, model, version, self._fingerprint),
            clock,
        )

    def observe(self, features: Any, output: Any) -> None:
        """Count one answered request (a few microseconds; never raises on odd values)."""
        columns = [self._requests_column]
        unprofiled = False
        for binners, value, default in (
            (self._features, features, "input"),
            (self._outputs, output, "output"),
        ):
            if not binners:
                continue
            present = value if isinstance(value, Mapping) else {default: value}
            for name, binner in binners.items():
                self._locate(binner, present.get(name), columns)
            if len(present) > len(binners) and any(k not in binners for k in present):
                unprofiled = True
        if unprofiled:
            columns.append(self._unprofiled_column)
        self._table.increment(columns)

    def _locate(self, binner: _Binner, value: Any, columns: list[int]) -> None:
        kind = binner.profile.kind
        # Fast paths for the common shapes (a float for a numeric field, a string for a
        # categorical one, a list of floats for a vector); anything else takes reduce_value.
        cls = type(value)
        if kind == "numeric" and (cls is float or cls is int):
            if not math.isfinite(value):  # NaN and infinities count as missing
                self._issue(binner, 0, columns)
                return
            self._bin_number(binner, value, columns)
            return
        if kind == "categorical" and cls is str:
            self._bin_category(binner, value, columns)
            return
        if kind == "norm" and cls is list:
            try:
                self._bin_number(binner, math.hypot(*value), columns)
            except TypeError:  # not all numbers
                self._issue(binner, 3, columns)
            return
        self._locate_slowly(binner, value, columns)

    def _locate_slowly(self, binner: _Binner, value: Any, columns: list[int]) -> None:
        field = binner.profile
        kind, reduced = reduce_value(value)
        if kind == "null":
            self._issue(binner, 0, columns)
            return
        if kind != _EXPECTED[field.kind] and not (field.kind == "categorical" and kind == "string"):
            self._issue(binner, 3, columns)
            return
        if field.kind in ("length", "norm", "top_class"):
            reduced = array_scalar(field.kind, reduced)
        elif field.kind == "text":
            reduced = float(len(reduced))
        if field.is_categorical:
            self._bin_category(binner, reduced, columns)
        else:
            self._bin_number(binner, reduced, columns)

    def _bin_number(self, binner: _Binner, number: float, columns: list[int]) -> None:
        if number < binner.low or number > binner.high:
            self._issue(binner, 1, columns)
        columns.append(binner.offset + bisect.bisect_right(binner.edges, number))

    def _bin_category(self, binner: _Binner, category: str, columns: list[int]) -> None:
        index = binner.categories.get(category)
        if index is None:
            index = len(binner.categories)
            self._issue(binner, 2, columns)
        columns.append(binner.offset + index)

    def _issue(self, binner: _Binner, issue: int, columns: list[int]) -> None:
        columns.append(binner.quality + issue)
        if self._on_issue is not None:
            self._on_issue(binner.profile.name, QUALITY_ISSUES[issue])

    def report(self) -> dict[str, Any]:
        """Drift and data quality over the window, summed over every worker (JSON-ready)."""
        window = self.profile.window
        counts = read_window(
            self._table,
            table_pattern(self._fingerprint),
            window.slots,
            window.slot_seconds,
            window.requests,
            self._requests_column,
            self._clock(),
        )
        total = counts.counts
        fields = []
        for binner in [*self._features.values(), *self._outputs.values()]:
            field = binner.profile
            live = [int(c) for c in total[binner.offset - 1 : binner.offset - 1 + field.bins]]
            quality = total[binner.quality - 1 : binner.quality - 1 + len(QUALITY_ISSUES)]
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
            "requests": int(total[self._requests_column - 1]),
            "workers": counts.workers,
            "unprofiled_requests": int(total[self._unprofiled_column - 1]),
            "drift_threshold": DRIFT_THRESHOLD,
            "fields": fields,
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
