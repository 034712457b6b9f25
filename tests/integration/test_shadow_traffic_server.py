"""Shadowing, traffic splits and the prediction log under a real gunicorn with 2 workers."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import LiveServer, launch, stop

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent.parent / "fixtures" / "shadowing"


def write_service(directory: Path, model_extra: str = "", service_extra: str = "") -> Path:
    """A copy of the shadowing fixture with its own servinglib.yaml."""
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "models").exists():
        shutil.copytree(FIXTURE / "models", directory / "models")
    config = directory / "servinglib.yaml"
    config.write_text(
        "service: shadowing\n"
        f"{service_extra}"
        "models:\n"
        "  - name: scorer\n"
        "    class: models/scorer/model.py:BehavingScorer\n"
        "    repository: models/scorer\n"
        "    default_version: '1'\n"
        f"{model_extra}"
    )
    return config


def post(url: str, x: float, **headers: str) -> requests.Response:
    return requests.post(
        f"{url}/infer",
        json={"model_id": "scorer", "features": {"x": x}},
        headers={"Connection": "close", **headers},
        timeout=30,
    )


def metric_values(url: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    values: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(requests.get(f"{url}/metrics", timeout=5).text):
        for sample in family.samples:
            if sample.name == name:
                key = tuple(sorted(sample.labels.items()))
                values[key] = values.get(key, 0.0) + sample.value
    return values


def total(url: str, name: str, **labels: str) -> float:
    return sum(
        v for key, v in metric_values(url, name).items() if labels.items() <= dict(key).items()
    )


def wait_for_metric(
    url: str, name: str, expected: float, timeout_s: float = 60, **labels: str
) -> float:
    deadline = time.monotonic() + timeout_s
    value = total(url, name, **labels)
    while value < expected and time.monotonic() < deadline:
        time.sleep(0.1)
        value = total(url, name, **labels)
    return value


def run_requests(url: str, xs: list[float]) -> list[tuple[int, Any]]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(lambda x: post(url, x), xs))
    return [
        (r.status_code, r.json()["output"] if r.status_code == 200 else r.json()) for r in responses
    ]


def test_failing_and_slow_shadows_never_touch_the_primary(
    tmp_path: Path, start_server: Any
) -> None:
    xs = [float(x) for x in range(1, 161)]
    plain: LiveServer = start_server(write_service(tmp_path / "plain"))
    baseline = run_requests(plain.url, xs)
    shadowed: LiveServer = start_server(
        write_service(
            tmp_path / "shadowed",
            "    shadow:\n      - {version: '2', sample_rate: 1.0}\n      - {version: '3', sample_rate: 1.0}\n",
            "shadow_executor: {max_concurrency: 1, max_queue: 2}\n",
        )
    )
    assert run_requests(shadowed.url, xs) == baseline
    assert all(status == 200 for status, _ in baseline)
    assert total(shadowed.url, "servinglib_requests_total", outcome="model_error") == 0
    assert total(shadowed.url, "servinglib_requests_total", outcome="success") == len(xs)
    errors = wait_for_metric(
        shadowed.url, "servinglib_shadow_requests_total", 1, shadow_version="2", outcome="error"
    )
    assert errors > 0
    assert total(shadowed.url, "servinglib_shadow_dropped_total") > 0, (
        "a 1-slot executor must shed copies"
    )
    ran = total(shadowed.url, "servinglib_shadow_requests_total")
    dropped = total(shadowed.url, "servinglib_shadow_dropped_total")
    assert wait_for_metric(
        shadowed.url, "servinglib_shadow_requests_total", 2 * len(xs) - dropped
    ) + dropped == 2 * len(xs), (ran, dropped)


def test_agreement_metrics_match_a_hand_computation(tmp_path: Path, start_server: Any) -> None:
    server: LiveServer = start_server(
        write_service(
            tmp_path,
            "    shadow:\n      - {version: '4', comparator: {kind: numeric, atol: 1.0e-9}}\n",
            "shadow_executor: {max_concurrency: 2, max_queue: 1000}\n",
        )
    )
    # Before any request, the configured pair's dropped counter is there, at 0 (gunicorn's
    # multiprocess metrics included), so "nothing dropped" is a series, not an absence.
    dropped = metric_values(server.url, "servinglib_shadow_dropped_total")
    assert [dict(key)["shadow_version"] for key in dropped] == ["4"]
    assert list(dropped.values()) == [0.0]
    statuses = Counter(
        status for status, _ in run_requests(server.url, [float(x) for x in range(100)])
    )
    assert statuses == {200: 100}
    # x == 0 is answered by the primary like any request; the shadow's x=0 answer agrees.
    comparisons = wait_for_metric(server.url, "servinglib_shadow_comparisons_total", 100)
    agreements = total(server.url, "servinglib_shadow_agreements_total")
    assert (agreements, comparisons) == (93, 100)
    assert agreements / comparisons == pytest.approx(0.93)


def test_copies_a_ready_shadow_turns_away_count_as_refused_with_few_log_lines(
    tmp_path: Path, start_server: Any
) -> None:
    server: LiveServer = start_server(
        write_service(
            tmp_path,
            # version 3 takes 20 ms a copy: a queued copy cannot finish within 21 ms
            "    shadow:\n      - {version: '3', timeout_ms: 21, comparator: {kind: exact}}\n",
            "shadow_executor: {max_concurrency: 8, max_queue: 1000}\n",
        ),
        "--workers",
        "2",
    )
    # every series of the configured pair is there at 0 before any copy (a shadow that
    # never agrees still has an agreement series, so the ratio and its alert evaluate)
    pair = {"primary_version": "1", "shadow_version": "3"}
    for name in ("servinglib_shadow_agreements_total", "servinglib_shadow_comparisons_total"):
        assert list(metric_values(server.url, name).values()) == [0.0], name
    outcomes = {
        dict(key)["outcome"]
        for key in metric_values(server.url, "servinglib_shadow_requests_total")
    }
    assert outcomes == {"ok", "error", "timeout", "refused", "not_ready"}
    xs = [float(x) for x in range(120)]
    assert {status for status, _ in run_requests(server.url, xs)} == {200}
    ran = wait_for_metric(server.url, "servinglib_shadow_requests_total", len(xs), **pair)
    assert ran == len(xs)
    refused = total(server.url, "servinglib_shadow_requests_total", outcome="refused")
    assert refused > 0
    assert total(server.url, "servinglib_shadow_requests_total", outcome="not_ready") == 0
    log = server.wait_for_log("refused a copy")
    # one warning per shadow, outcome and minute in each of the 2 workers
    assert 1 <= log.count("refused a copy") <= 2, log.count("refused a copy")
    assert log.count("; not compared") <= 2  # late copies: one line per worker, not per copy


def test_traffic_split_is_weighted_sticky_and_overridable(
    tmp_path: Path, start_server: Any
) -> None:
    server: LiveServer = start_server(write_service(tmp_path, "    traffic: {'1': 90, '5': 10}\n"))

    def version_for(key: str) -> str:
        response = post(server.url, 1.0, **{"x-routing-key": key})
        assert response.headers["x-servinglib-model-version"] == response.json()["version"]
        return str(response.json()["version"])

    with ThreadPoolExecutor(max_workers=8) as pool:
        versions = list(pool.map(version_for, [f"user-{i}" for i in range(2000)]))
    share = Counter(versions)["5"] / len(versions)
    assert abs(share - 0.10) <= 0.03, share
    for i in range(0, 2000, 97):
        assert version_for(f"user-{i}") == versions[i]
    explicit = requests.post(
        f"{server.url}/infer",
        json={"model_id": "scorer", "version": "5", "features": {"x": 1}},
        headers={"x-routing-key": "user-0"},
        timeout=5,
    ).json()
    assert explicit["version"] == "5"
    v2 = requests.post(
        f"{server.url}/v2/models/scorer/infer",
        headers={"x-routing-key": "user-3"},
        timeout=5,
        json={"inputs": [{"name": "x", "shape": [1], "datatype": "FP64", "data": [1.0]}]},
    )
    assert v2.status_code == 200
    assert v2.json()["model_version"] == versions[3]


POSTGRES_URL = os.environ.get("SERVINGLIB_TEST_POSTGRES_URL", "")


def db_rows(url: str) -> list[tuple[str, str, str | None]]:
    query = "SELECT request_id, version, shadow_of FROM predictions"
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
            return connection.execute(query).fetchall()
    import psycopg

    with psycopg.connect(url) as connection:
        return connection.execute(query).fetchall()  # type: ignore[return-value]


@pytest.mark.parametrize(
    "sink",
    [
        "sqlite",
        pytest.param(
            "postgresql",
            marks=[
                pytest.mark.skipif(
                    not POSTGRES_URL,
                    reason="set SERVINGLIB_TEST_POSTGRES_URL (.ci/run starts PostgreSQL)",
                ),
                pytest.mark.services,
            ],
        ),
    ],
)
def test_prediction_log_loses_nothing_on_sigterm(tmp_path: Path, sink: str) -> None:
    if sink == "sqlite":
        url = f"sqlite:///{tmp_path / 'predictions.db'}"
    else:
        import psycopg

        url = POSTGRES_URL
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("DROP TABLE IF EXISTS predictions")
    config = write_service(
        tmp_path,
        "    shadow:\n      - {version: '5', sample_rate: 1.0}\n",
        f"monitoring:\n  prediction_log: {{url: '{url}', sample_rate: 1.0, "
        "flush_interval_ms: 60000, batch_size: 10000}\n",
    )
    server = launch(config, tmp_path, "--workers", "2")
    answered: list[str] = []

    def one(i: int) -> None:
        try:
            response = requests.post(
                f"{server.url}/infer",
                timeout=30,
                json={"model_id": "scorer", "features": {"x": i + 1}},
                headers={"x-request-id": f"req-{i}", "Connection": "close"},
            )
        except requests.ConnectionError:
            return  # refused after shutdown began: not answered, so not logged
        if response.status_code == 200:
            answered.append(response.headers["x-request-id"])

    with ThreadPoolExecutor(max_workers=16) as pool:
        futures = [pool.submit(one, i) for i in range(600)]
        while len(answered) < 150:
            time.sleep(0.005)
        server.process.send_signal(signal.SIGTERM)  # mid-load: requests are in flight
        for future in futures:
            future.result()
    server.process.wait(timeout=60)
    assert server.process.returncode == 0, server.log()
    assert len(answered) >= 150
    primary = [request_id for request_id, _, shadow_of in db_rows(url) if shadow_of is None]
    assert sorted(primary) == sorted(answered), f"{len(primary)} rows for {len(answered)} answers"
    # The log keeps working after a restart.
    again = launch(config, tmp_path, "--workers", "2")
    try:
        assert post(again.url, 3.0, **{"x-request-id": "after-restart"}).status_code == 200
    finally:
        stop(again.process)
    ids = [request_id for request_id, _, shadow_of in db_rows(url) if shadow_of is None]
    assert len(ids) == len(answered) + 1
    assert "after-restart" in ids
    shadows = [row for row in db_rows(url) if row[2] is not None]
    assert shadows
    assert all(version == "5" and shadow_of == "1" for _, version, shadow_of in shadows)


def test_validation_failure_metrics(tmp_path: Path, start_server: Any) -> None:
    config = write_service(
        tmp_path,
        "    input_schema: {type: object, required: [x], properties: {x: {type: number}}}\n",
    )
    server: LiveServer = start_server(config)
    for x in (0.1, 0.2, 3.0):
        assert post(server.url, x).status_code == 200
    bad = requests.post(
        f"{server.url}/infer", json={"model_id": "scorer", "features": {"x": "high"}}, timeout=5
    )
    assert bad.status_code == 400
    missing = requests.post(
        f"{server.url}/infer", json={"model_id": "scorer", "features": {}}, timeout=5
    )
    assert missing.status_code == 400
    assert (
        total(server.url, "servinglib_input_validation_failures_total", model="scorer", field="x")
        == 1
    )
    assert (
        total(
            server.url,
            "servinglib_input_validation_failures_total",
            model="scorer",
            field="features",
        )
        == 1
    )


def test_grafana_dashboard_covers_every_metric() -> None:
    import json

    from servinglib.monitoring.metrics import METRIC_SPECS

    dashboard = json.loads(
        (Path(__file__).parents[2] / "docs" / "grafana" / "servinglib.json").read_text()
    )
    expressions = " ".join(
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    )
    for spec in METRIC_SPECS:
        assert spec.name.removesuffix("_total") in expressions, spec.name
