"""Metrics from model code (``self.metrics``) under a real gunicorn with 2 workers."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import LiveServer
from tests.integration.test_shadow_traffic_server import metric_values, total

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent.parent / "fixtures" / "model_metrics"


def test_model_metrics_sum_over_workers_with_model_and_version_labels(
    tmp_path: Path, start_server: Any
) -> None:
    shutil.copytree(FIXTURE, tmp_path / "service")
    server: LiveServer = start_server(tmp_path / "service" / "servinglib.yaml", "--workers", "2")
    pids, sent = set(), 0
    while sent < 30 or (len(pids) < 2 and sent < 300):  # 30, and more until both answered
        response = requests.post(
            f"{server.url}/infer",
            json={"model_id": "counting", "features": {"x": 5 if sent % 3 else -5}},
            headers={  # a new connection: any worker may take it; traced, were tracing on
                "Connection": "close",
                "traceparent": f"00-{sent + 1:032x}-{sent + 1:016x}-01",
            },
            timeout=30,
        )
        assert response.status_code == 200, response.text
        pids.add(response.json()["output"]["pid"])
        sent += 1
    assert len(pids) == 2, "every request went to one worker"
    labels = (("model", "counting"), ("version", "1"))
    assert metric_values(server.url, "answers_total") == {labels: float(sent)}
    assert metric_values(server.url, "x_seen_count") == {labels: float(sent)}
    negatives = len(range(0, sent, 3))  # x = -5 for every third request
    assert total(server.url, "x_seen_bucket", le="1.0", model="counting") == negatives
    by_sign = metric_values(server.url, "answers_by_sign_total")
    assert by_sign == {
        (("model", "counting"), ("sign", "neg"), ("version", "1")): float(negatives),
        (("model", "counting"), ("sign", "pos"), ("version", "1")): float(sent - negatives),
    }
    # tracing is off: the OpenMetrics scrape has no exemplar
    scraped = requests.get(
        f"{server.url}/metrics", headers={"Accept": "application/openmetrics-text"}, timeout=5
    )
    assert scraped.headers["Content-Type"].startswith("application/openmetrics-text")
    assert "servinglib_request_duration_seconds_bucket" in scraped.text
    assert " # {" not in scraped.text
    # version 2 asks for one of servinglib's own names: its load failed, saying why
    models = requests.get(f"{server.url}/models", timeout=5).json()
    assert "metric 'servinglib_requests' collides with servinglib's own metrics" in str(models)
