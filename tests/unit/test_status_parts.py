"""The status page's pieces in process: the off switch, quantiles of histogram deltas."""

from __future__ import annotations

import math

import pytest

from servinglib.http.status_data import _quantile
from servinglib.serve.app import create_app_from_config
from tests.conftest import SERVICE_CONFIG


def test_status_page_false_serves_neither_route(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVINGLIB_STATUS_PAGE", "false")
    client = create_app_from_config(SERVICE_CONFIG).test_client()
    assert client.get("/status").status_code == 404
    assert client.get("/status.json").status_code == 404
    assert client.get("/models").status_code == 200


def test_a_non_boolean_status_page_variable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from servinglib.config.spec import load_config
    from servinglib.errors import ConfigError

    monkeypatch.setenv("SERVINGLIB_STATUS_PAGE", "maybe")
    with pytest.raises(ConfigError, match="a boolean; set true or false"):
        load_config(SERVICE_CONFIG)


def test_quantile_interpolates_inside_the_bucket() -> None:
    buckets = {0.01: 50.0, 0.1: 90.0, 1.0: 100.0, math.inf: 100.0}
    assert _quantile(buckets, 0.5) == pytest.approx(0.01)
    assert _quantile(buckets, 0.95) == pytest.approx(0.1 + 0.9 * 0.5)
    assert _quantile({math.inf: 0.0}, 0.95) is None
