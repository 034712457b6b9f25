"""The server's side of ``Model.metrics``: prometheus_client metrics labelled with model and
version, in multiprocess mode like servinglib's own (summed over workers on ``/metrics``).

One metric object per name in the process, shared by every model and version that asks for
it (their series differ by the ``model`` and ``version`` labels); asking again for a name
with another kind, help text or labels is refused. The metrics are registered nowhere:
under the launcher, multiprocess mode writes each value to the metrics directory, where the
``/metrics`` collector reads every worker's.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from servinglib.errors import ConfigError
from servinglib.model_metrics import AUTOMATIC_LABELS, ModelMetrics, check_metric

__all__ = ["metrics_for"]

_lock = threading.Lock()
# name -> (kind, help text, extra labels, buckets, the metric)
_declared: dict[str, tuple[str, str, tuple[str, ...], tuple[float, ...], Any]] = {}


def metrics_for(model: str, version: str) -> ModelMetrics:
    """The metrics factory of one model version (what the registry hands ``configure``)."""
    return _ServedMetrics(model, version)


class _Bound:
    """A model's metric: its ``model`` and ``version`` labels filled in."""

    __slots__ = ("_labelled", "_metric", "_values")

    def __init__(self, metric: Any, values: tuple[str, str], labelled: bool) -> None:
        self._metric, self._values, self._labelled = metric, values, labelled

    def labels(self, *values: Any, **named: Any) -> Any:
        """The series of the declared extra labels' ``values``."""
        if named:
            model, version = self._values
            return self._metric.labels(model=model, version=version, **named)
        return self._metric.labels(*self._values, *values)

    def _child(self) -> Any:
        if self._labelled:
            raise ConfigError(
                "this metric declares labels: call .labels(...) before inc/dec/set/observe"
            )
        return self._metric.labels(*self._values)

    def inc(self, amount: float = 1) -> None:
        """Add ``amount`` (counters and gauges)."""
        self._child().inc(amount)

    def dec(self, amount: float = 1) -> None:
        """Subtract ``amount`` (gauges)."""
        self._child().dec(amount)

    def set(self, value: float) -> None:
        """Set the value (gauges)."""
        self._child().set(value)

    def observe(self, value: float) -> None:
        """Record one observation (histograms)."""
        self._child().observe(value)


class _ServedMetrics:
    def __init__(self, model: str, version: str) -> None:
        self._model, self._version = model, version

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Any:
        return self._declare("counter", name, documentation, labels, ())

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Any:
        return self._declare("gauge", name, documentation, labels, ())

    def histogram(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float] | None = None,
        labels: Sequence[str] = (),
    ) -> Any:
        return self._declare("histogram", name, documentation, labels, tuple(buckets or ()))

    def _declare(
        self,
        kind: str,
        name: str,
        documentation: str,
        labels: Sequence[str],
        buckets: tuple[float, ...],
    ) -> _Bound:
        check_metric(self._model, kind, name, labels)
        extra = tuple(labels)
        with _lock:
            known = _declared.get(name)
            if known is None:
                metric = _new(kind, name, documentation, (*AUTOMATIC_LABELS, *extra), buckets)
                _declared[name] = (kind, documentation, extra, buckets, metric)
            else:
                if known[:4] != (kind, documentation, extra, buckets):
                    raise ConfigError(
                        f"model {self._model!r} metric {name!r}: declared already as a "
                        f"{known[0]} with labels {list(known[2])} and help {known[1]!r}; "
                        "one name has one kind, help text, labels and buckets in a server"
                    )
                metric = known[4]
        return _Bound(metric, (self._model, self._version), bool(extra))


def _new(
    kind: str, name: str, documentation: str, labels: tuple[str, ...], buckets: tuple[float, ...]
) -> Any:
    if kind == "counter":
        return Counter(name, documentation, labels, registry=None)
    if kind == "gauge":
        return Gauge(name, documentation, labels, registry=None, multiprocess_mode="livesum")
    if buckets:
        return Histogram(name, documentation, labels, registry=None, buckets=buckets)
    return Histogram(name, documentation, labels, registry=None)
