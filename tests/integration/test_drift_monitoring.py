"""Drift monitoring under a real ``servinglib serve --workers 2``: scores cover every worker."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import FIXTURES, LiveServer

pytestmark = pytest.mark.integration

FEATURES = ("a", "b", "c", "city")


def reference_rows(count: int, seed: int) -> list[dict[str, Any]]:
    """Rows of the reference distribution: a ~ N(0, 1), b ~ N(5, 2), c ~ Exp(1), a city."""
    rng = np.random.default_rng(seed)
    cities = rng.choice(["paris", "lyon", "nice"], size=count, p=[0.5, 0.3, 0.2])
    return [
        {
            "a": float(rng.normal(0, 1)),
            "b": float(rng.normal(5, 2)),
            "c": float(rng.exponential(1)),
            "city": str(city),
        }
        for city in cities
    ]


@pytest.fixture(scope="module")
def drift_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.conftest import launch, stop

    root = tmp_path_factory.mktemp("drift")
    service = root / "service"
    shutil.copytree(FIXTURES / "drift", service)
    data = root / "reference.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in reference_rows(5000, seed=1)))
    shutil.copytree(service / "models" / "risk" / "1", service / "models" / "risk" / "4")
    config = service / "servinglib.yaml"
    for version in ("1", "2", "3", "4"):
        command = ["profile", "--config", str(config), "--model", "risk", "--version", version]
        subprocess.run(
            [sys.executable, "-m", "servinglib.cli.main", *command, "--data", str(data)],
            check=True,
            capture_output=True,
        )
    server = launch(config, root, "--workers", "2")
    yield server
    stop(server.process)


def infer(url: str, version: str, features: dict[str, Any], session: Any = None) -> None:
    body = {"model_id": "risk", "version": version, "features": features}
    if session is None:  # a fresh connection per request: the kernel spreads them over workers
        response = requests.post(
            f"{url}/infer", json=body, headers={"Connection": "close"}, timeout=30
        )
    else:  # one kept-alive connection: one worker answers everything
        response = session.post(f"{url}/infer", json=body, timeout=30)
    assert response.status_code == 200, response.text


def spread(url: str, version: str, rows: list[dict[str, Any]]) -> None:
    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(lambda row: infer(url, version, row), rows))


def eventually(read: Callable[[], Any], ok: Callable[[Any], bool], what: str) -> Any:
    """``read()`` once ``ok`` holds: each worker bins its queued requests a few times a second."""
    deadline = time.monotonic() + 60
    while True:
        value = read()
        if ok(value):
            return value
        assert time.monotonic() < deadline, f"{what}: still {value}"
        time.sleep(0.05)


def drift(url: str, version: str, requests_in_window: int | None = None) -> dict[str, Any]:
    """The drift report, once it counts ``requests_in_window`` requests when that is given."""

    def read() -> dict[str, Any]:
        response = requests.get(
            f"{url}/v2/models/risk/versions/{version}/drift",
            headers={"Connection": "close"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        report: dict[str, Any] = response.json()
        return report

    if requests_in_window is None:
        return read()
    return eventually(
        read,
        lambda r: r["requests"] == requests_in_window,
        f"version {version} should count {requests_in_window} requests",
    )


def scores(report: dict[str, Any]) -> dict[str, float]:
    return {f["name"]: f["psi"] for f in report["fields"]}


def test_in_distribution_traffic_stays_below_0_1_and_every_worker_counts(
    drift_server: LiveServer,
) -> None:
    spread(drift_server.url, "1", reference_rows(1000, seed=2))
    reports = [drift(drift_server.url, "1", 1000) for _ in range(8)]  # whichever worker answers
    assert all(r == reports[0] for r in reports)
    report = reports[0]
    assert report["requests"] == 1000
    assert report["workers"] == 2
    assert all(psi < 0.1 for psi in scores(report).values()), scores(report)


def test_a_shift_of_one_std_drifts_that_feature_only_whoever_answered(
    drift_server: LiveServer,
) -> None:
    shifted = reference_rows(1000, seed=3)
    for row in shifted:
        row["a"] += 1.0  # one standard deviation of the reference
    with requests.Session() as session:
        for row in shifted:
            infer(drift_server.url, "2", row, session)
    spread(drift_server.url, "3", shifted)
    one_worker, both_workers = (
        drift(drift_server.url, "2", 1000),
        drift(drift_server.url, "3", 1000),
    )
    assert (one_worker["workers"], both_workers["workers"]) == (1, 2)
    assert one_worker["requests"] == both_workers["requests"] == 1000
    assert scores(one_worker) == scores(both_workers)
    psi = scores(both_workers)
    assert psi["a"] > 0.25
    assert all(psi[name] < 0.1 for name in ("b", "c", "city")), psi
    drifted = {f["name"] for f in both_workers["fields"] if f["drifted"]}
    assert "a" in drifted
    assert not drifted & {"b", "c", "city"}
    print(json.dumps(both_workers))  # shown with -rP: the shifted scenario's drift JSON


def test_new_categories_and_nulls_reach_the_quality_counters(drift_server: LiveServer) -> None:
    odd = [{"a": 0.1, "b": None, "c": 1.0, "city": "tokyo"} for _ in range(12)]
    spread(drift_server.url, "1", odd)
    report = eventually(
        lambda: drift(drift_server.url, "1"),
        lambda r: {f["name"]: f for f in r["fields"]}["city"]["quality"]["unseen_category"] >= 12,
        "the new city should reach the drift report",
    )
    fields = {f["name"]: f for f in report["fields"]}
    assert fields["city"]["quality"]["unseen_category"] == 12
    assert fields["b"]["quality"]["missing"] == 12

    def quality_counters() -> tuple[str, dict[tuple[str, str], float]]:
        text = requests.get(f"{drift_server.url}/metrics", timeout=30).text
        return text, {
            (s.labels["field"], s.labels["issue"]): s.value
            for family in text_string_to_metric_families(text)
            if family.name.startswith("servinglib_data_quality_issues")
            for s in family.samples
            if s.name.endswith("_total") and s.labels["version"] == "1"
        }

    text, counted = eventually(
        quality_counters,
        lambda found: found[1].get(("b", "missing"), 0) >= 12,
        "the data-quality counters should count the nulls",
    )
    assert counted.get(("city", "unseen_category")) == 12, [
        line for line in text.splitlines() if "quality" in line
    ]
    assert counted[("b", "missing")] == 12
    psi = {
        s.labels["field"]: s.value
        for family in text_string_to_metric_families(text)
        if family.name == "servinglib_drift_psi"
        for s in family.samples
        if s.labels["version"] == "3"
    }
    assert psi["a"] > 0.25


def test_open_inference_tensors_are_the_features_they_name(drift_server: LiveServer) -> None:
    """Version 4 answers v2 requests only: one-element tensors, as tritonclient sends them."""
    import tritonclient.http as httpclient

    rows = reference_rows(5000, seed=1)[:300]  # rows of the reference itself
    client = httpclient.InferenceServerClient(url=drift_server.url.removeprefix("http://"))
    try:
        for row in rows:
            tensors = []
            for name in ("a", "b", "c"):
                tensor = httpclient.InferInput(name, [1, 1], "FP64")
                tensor.set_data_from_numpy(np.array([[row[name]]]))
                tensors.append(tensor)
            city = httpclient.InferInput("city", [1], "BYTES")
            city.set_data_from_numpy(np.array([row["city"].encode()], dtype=np.object_))
            client.infer("risk", [*tensors, city], model_version="4")
    finally:
        client.close()
    report = drift(drift_server.url, "4", 300)
    assert report["unprofiled_requests"] == 0
    features = {f["name"]: f for f in report["fields"] if f["role"] == "feature"}
    assert set(features) == set(FEATURES)
    for name, field in features.items():
        assert field["samples"] == 300, name
        assert not any(field["quality"].values()), (name, field["quality"])
        assert field["psi"] < 0.1, (name, field["psi"])
