"""Names a model may give its metrics, and what ``self.metrics`` is outside the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import servinglib
from servinglib.errors import ConfigError
from servinglib.model import ModelSettings
from servinglib.monitoring.model_metrics import metrics_for


class Counting(servinglib.Model):
    def load(self, path: Path) -> None:
        self.seen = self.metrics.counter("seen", "Requests seen.")

    def predict(self, features: Any) -> Any:
        self.seen.inc()
        return features


@pytest.mark.parametrize(
    ("kind", "name", "labels", "message"),
    [
        ("counter", "servinglib_requests", (), "collides with servinglib's own metrics"),
        ("counter", "trips_total", (), "leave '_total' out"),
        ("gauge", "2fast", (), "letters, digits and underscores"),
        ("histogram", "latency", ("version",), "label 'version' is not allowed"),
    ],
)
def test_names_and_labels_a_model_may_not_use_are_refused(
    kind: str, name: str, labels: tuple[str, ...], message: str
) -> None:
    metrics = metrics_for("eta", "1")
    with pytest.raises(ConfigError, match=message) as refused:
        getattr(metrics, kind)(name, "help", labels=labels)
    assert "model 'eta'" in str(refused.value)


def test_one_name_has_one_kind_and_help_text() -> None:
    metrics_for("eta", "1").counter("unit_rides", "Rides.")
    metrics_for("eta", "2").counter("unit_rides", "Rides.")  # another version shares it
    with pytest.raises(ConfigError, match="declared already as a counter"):
        metrics_for("eta", "3").gauge("unit_rides", "Rides.")


def test_a_labelled_metric_needs_its_labels() -> None:
    counter = metrics_for("eta", "1").counter("unit_by_city", "By city.", ("city",))
    counter.labels(city="SF").inc()
    counter.labels("NYC").inc()
    with pytest.raises(ConfigError, match=r"call \.labels"):
        counter.inc()


def test_outside_the_server_metrics_count_nothing_but_names_are_still_checked() -> None:
    model = Counting()
    model.configure(ModelSettings(name="offline", version="1"))
    model.load(Path("."))
    assert model.predict({"x": 1}) == {"x": 1}
    with pytest.raises(ConfigError, match="collides"):
        model.metrics.histogram("servinglib_latency", "no")
