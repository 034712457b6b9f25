"""One server with every optional feature on: its /metrics pass ``promtool check metrics``,
and loading composed versions writes nothing to the prediction log and copies nothing.

The composition fixture plus drift monitoring (a profile on ``prep``), a shadow on ``const``
(an ensemble member), a precomputed version of ``const`` and a SQLite prediction log.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from benchmarks.composition_service import composition_service
from servinglib.monitoring.drift.profile import build_profile
from tests.conftest import LiveServer, launch, stop
from tests.integration.test_composition_server import infer
from tests.integration.test_shadow_traffic_server import total, wait_for_metric

pytestmark = pytest.mark.integration

PROMTOOL = shutil.which("promtool")
EXTRA_MODELS = """\
  - name: const-nightly
    runtime: precomputed
    repository: models/const
    versions: [nightly]
    default_version: nightly
    require_self_tests: false
    runtime_options: {key: id, file: predictions.parquet, fallback_version: "1"}
monitoring:
  prediction_log: {url: "sqlite:///predictions.db", flush_interval_ms: 50}
"""


def every_feature_service(directory: Path) -> Path:
    config = composition_service(directory)
    text = config.read_text()
    text = text.replace(  # a shadow on an ensemble member: self-tests of ensembles call it
        "  - name: const\n    class: models/members.py:Const\n    repository: models/const\n"
        '    default_version: "1"\n',
        "  - name: const\n    class: models/members.py:Const\n    repository: models/const\n"
        '    default_version: "1"\n    versions: ["1", "3", "9"]\n'
        '    shadow: [{version: "3", comparator: {kind: exact}}]\n',
    )
    config.write_text(text + EXTRA_MODELS)
    nightly = directory / "models" / "const" / "nightly"
    nightly.mkdir()
    pq.write_table(pa.table({"id": [1, 2], "score": [10.0, 20.0]}), nightly / "predictions.parquet")
    rows = [
        ({"values": [float(i), 1.0, 0.0, 2.0]}, {"x": [float(i), 1.0, 0.0, 2.0]}) for i in range(50)
    ]
    build_profile(rows).save(directory / "models" / "prep" / "1" / "profile.json")
    return config


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    directory = tmp_path_factory.mktemp("every-feature")
    live = launch(every_feature_service(directory / "service"), directory)
    yield live
    stop(live.process)


def _rows(server: LiveServer) -> list[tuple[str, str]]:
    database = next(server.log_path.parent.rglob("predictions.db"), None)
    if database is None:
        return []
    with sqlite3.connect(database) as db:
        return db.execute(  # answers, not shadow answers (logged when their copy ran)
            "SELECT request_id, model FROM predictions WHERE shadow_of IS NULL"
        ).fetchall()


def test_loading_composed_versions_logs_and_copies_nothing(server: LiveServer) -> None:
    # every worker loaded and self-tested the ensembles (members const 1 and 3) already
    assert total(server.url, "servinglib_shadow_requests_total", model="const") == 0
    assert infer(server.url, "vote-rest", {}).status_code == 200
    copies = wait_for_metric(server.url, "servinglib_shadow_requests_total", 1, model="const")
    assert copies == 1  # const 1 answered one real request, copied to const 3
    assert total(server.url, "servinglib_shadow_comparisons_total", model="const") == 1
    deadline = time.monotonic() + 60
    while not any(model == "vote-rest" for _, model in _rows(server)):
        assert time.monotonic() < deadline, "the request never reached the prediction log"
        time.sleep(0.05)
    # the request and its three member calls, written in order after anything queued before
    assert Counter(model for _, model in _rows(server)) == {"vote-rest": 1, "const": 2, "flaky": 1}


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_metrics_pass_promtool_check_metrics(server: LiveServer) -> None:
    assert PROMTOOL is not None
    for i in range(5):
        assert (
            infer(server.url, "classify", {"values": [float(i), 1.0, 0.0, 2.0]}).status_code == 200
        )
        assert infer(server.url, "vote-rest", {}).status_code == 200
        assert (
            infer(server.url, "classify-shadowed", {"values": [1.0, 2.0, 3.0, 4.0]}).status_code
            == 200
        )
    hit = infer(server.url, "const-nightly", {"id": 1})
    assert hit.headers["x-servinglib-precomputed"] == "hit"
    assert infer(server.url, "const-nightly", {"id": 7, "anything": 1}).json()["output"] == {
        "score": 1.0
    }
    wait_for_metric(server.url, "servinglib_shadow_comparisons_total", 5, model="classify-shadowed")
    body = requests.get(f"{server.url}/metrics", timeout=30).text
    for family in (
        "servinglib_drift_psi",
        "servinglib_drift_output_window_answers",
        "servinglib_shadow_agreements_total",
        "servinglib_step_duration_seconds_bucket",
        "servinglib_precomputed_lookups_total",
        "servinglib_prediction_log_records_total",
    ):
        assert f"\n{family}{{" in body, family  # every feature is in the scrape
    result = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=body, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # the OpenMetrics exposition of the same families parses (promtool reads only the above)
    openmetrics = requests.get(
        f"{server.url}/metrics", headers={"Accept": "application/openmetrics-text"}, timeout=30
    )
    names = {f.name for f in text_string_to_metric_families(openmetrics.text)}  # type: ignore[no-untyped-call]
    assert {"servinglib_drift_psi", "servinglib_step_duration_seconds"} <= names
