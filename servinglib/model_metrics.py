"""Metrics a model counts itself: what ``self.metrics`` gives model code.

A model asks for its metrics in ``load()`` and updates them in ``predict()``::

    def load(self, path: Path) -> None:
        self.long_trips = self.metrics.counter("long_trips", "Trips over 50 km answered.")
        self.distance = self.metrics.histogram("trip_km", "Distance asked for.", (1, 5, 20, 50))

    def predict(self, features: dict[str, Any]) -> dict[str, Any]:
        if features["distance_km"] > 50:
            self.long_trips.inc()

Every series gets the ``model`` and ``version`` labels of the instance that made it; more
labels can be declared (``labels=("city",)``, then ``.labels(city="SF").inc()``). Under the
server the metrics are prometheus_client's, summed over every gunicorn worker on
``/metrics``; elsewhere (batch prediction, ``servinglib selftest``) they count nothing.

Names are checked here, before any backend sees them, so a model fails its load the same
way everywhere: ``servinglib_`` is servinglib's own prefix, and one name has one kind.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from servinglib.errors import ConfigError

__all__ = [
    "NO_METRICS",
    "ModelMetrics",
    "check_metric",
]

RESERVED_PREFIX = "servinglib_"
AUTOMATIC_LABELS = ("model", "version")
_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_KINDS = ("counter", "gauge", "histogram")


class ModelMetrics(Protocol):
    """Creates a model version's metrics (``Model.metrics``); call it in ``load()``.

    Each method returns the metric for this model and version: ``inc()`` a counter,
    ``inc()``/``dec()``/``set()`` a gauge, ``observe()`` a histogram; with ``labels``,
    ``.labels(...)`` first.
    """

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Any:
        """A counter (exported as ``<name>_total``)."""

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Any:
        """A gauge, summed over the live workers."""

    def histogram(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float] | None = None,
        labels: Sequence[str] = (),
    ) -> Any:
        """A histogram (prometheus_client's default buckets unless ``buckets``)."""


def check_metric(model: str, kind: str, name: str, labels: Sequence[str]) -> None:
    """Refuse a metric name or label a model may not use.

    Raises:
        ConfigError: naming the model, the metric and the fix.
    """
    if kind not in _KINDS:
        raise ConfigError(f"model {model!r}: metric kind {kind!r} is not one of {_KINDS}")
    where = f"model {model!r} metric {name!r}"
    if not _NAME.match(name):
        raise ConfigError(
            f"{where}: a metric name is letters, digits and underscores, not starting with "
            "a digit (e.g. 'long_trips')"
        )
    if name.startswith(RESERVED_PREFIX):
        raise ConfigError(
            f"{where} collides with servinglib's own metrics ({RESERVED_PREFIX}*, see "
            "docs/reference/metrics.md); choose a name without that prefix"
        )
    if kind == "counter" and name.endswith("_total"):
        raise ConfigError(
            f"{where}: leave '_total' out; a counter is exported as '<name>_total' already"
        )
    for label in labels:
        if label in AUTOMATIC_LABELS or not _NAME.match(label) or label.startswith("__"):
            raise ConfigError(
                f"{where}: label {label!r} is not allowed ('model' and 'version' are added "
                "for you; a label is letters, digits and underscores)"
            )


class _Uncounted:
    """A metric that counts nothing (outside the server)."""

    def labels(self, *values: Any, **named: Any) -> _Uncounted:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass


class _NoMetrics:
    """:class:`ModelMetrics` that checks names and counts nothing (batch, selftest)."""

    def __init__(self, model: str = "") -> None:
        self._model = model

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Any:
        check_metric(self._model, "counter", name, labels)
        return _Uncounted()

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Any:
        check_metric(self._model, "gauge", name, labels)
        return _Uncounted()

    def histogram(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float] | None = None,
        labels: Sequence[str] = (),
    ) -> Any:
        check_metric(self._model, "histogram", name, labels)
        return _Uncounted()


# What ``Model.metrics`` is where no server gives the model its metrics.
NO_METRICS: ModelMetrics = _NoMetrics()
