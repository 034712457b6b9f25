"""``servinglib profile``, ``servinglib drift report``, ``validate`` and the drift endpoint."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from servinglib.cli.main import main
from servinglib.serve.app import create_app_from_config
from tests.conftest import FIXTURES


@pytest.fixture
def service(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES / "drift", tmp_path / "service")
    return tmp_path / "service" / "servinglib.yaml"


def rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "a": float(rng.normal()),
            "b": float(rng.normal(5, 2)),
            "c": float(rng.exponential()),
            "city": ["paris", "lyon", "nice"][i % 3],
        }
        for i in range(count)
    ]


def write_jsonl(path: Path, data: list[dict[str, Any]]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in data))
    return path


def profile_of(config: Path, version: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(
        (config.parent / "models" / "risk" / version / "profile.json").read_text()
    )
    return document


def test_profile_from_csv_and_parquet(service: Path, tmp_path: Path, capsys: Any) -> None:
    csv_file = tmp_path / "train.csv"
    csv_file.write_text(
        "a,city\n" + "".join(f"{i / 10},{'xy'[i % 2]}\n" for i in range(50)) + ",x\n"
    )
    common = ["--config", str(service), "--model", "risk"]
    assert main(["profile", *common, "--version", "1", "--data", str(csv_file)]) == 0
    assert "profile of 4 field(s) written to" in capsys.readouterr().out
    fields = {f["name"]: f for f in profile_of(service, "1")["fields"]}
    assert fields["a"]["kind"] == "numeric"
    assert fields["a"]["null_share"] == pytest.approx(1 / 51)
    assert fields["city"]["categories"] == ["x", "y"]
    assert {fields["score"]["role"], fields["segment"]["kind"]} == {"output", "categorical"}

    parquet = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows(300)), parquet)
    argv = [*common, "--version", "2", "--data", str(parquet), "--no-outputs"]
    assert main(["profile", *argv, "--window-seconds", "120", "--window-requests", "500"]) == 0
    document = profile_of(service, "2")
    assert document["window"] == {"seconds": 120.0, "slots": 10, "requests": 500}
    assert sorted(f["name"] for f in document["fields"]) == ["a", "b", "c", "city"]
    assert main(["validate", "--config", str(service)]) == 0


def test_validate_reports_a_damaged_profile(service: Path, tmp_path: Path, capsys: Any) -> None:
    data = write_jsonl(tmp_path / "train.jsonl", rows(100))
    common = ["--config", str(service), "--model", "risk", "--version", "1"]
    assert main(["profile", *common, "--data", str(data)]) == 0
    path = service.parent / "models" / "risk" / "1" / "profile.json"
    path.write_text(path.read_text().replace('"format_version": 1', '"format_version": 7'))
    assert main(["validate", "--config", str(service)]) == 1
    assert f"{path}: not a valid profile (format_version must be 1)" in capsys.readouterr().err


def test_unknown_data_format_is_a_usage_error(service: Path, tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / "train.xlsx"
    bad.write_text("")
    argv = ["--config", str(service), "--model", "risk", "--version", "1", "--data", str(bad)]
    assert main(["profile", *argv]) == 2
    assert "unknown data format '.xlsx'; use .parquet, .csv or .jsonl" in capsys.readouterr().err


POSTGRES_URL = os.environ.get("SERVINGLIB_TEST_POSTGRES_URL", "")
LOGS = [
    pytest.param("sqlite:///log.sqlite", id="sqlite"),
    pytest.param(
        POSTGRES_URL,
        id="postgresql",
        marks=[
            pytest.mark.skipif(
                not POSTGRES_URL,
                reason="set SERVINGLIB_TEST_POSTGRES_URL to a PostgreSQL database (.ci/run does)",
            ),
            pytest.mark.services,
        ],
    ),
]


@pytest.mark.parametrize("log_url", LOGS)
def test_drift_endpoint_and_offline_report(
    service: Path, tmp_path: Path, capsys: Any, log_url: str
) -> None:
    if log_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(log_url, autocommit=True) as connection:  # a log of this test only
            connection.execute("DROP TABLE IF EXISTS predictions")
    data = write_jsonl(tmp_path / "train.jsonl", rows(3000))
    common = ["--config", str(service), "--model", "risk"]
    assert main(["profile", *common, "--version", "1", "--data", str(data)]) == 0
    service.write_text(
        service.read_text() + f"monitoring:\n  prediction_log: {{url: '{log_url}'}}\n"
    )
    app = create_app_from_config(service)
    client = app.test_client()
    for row in rows(600, seed=1):
        shifted = {**row, "b": row["b"] + 2}
        response = client.post("/infer", json={"model_id": "risk", "features": shifted})
        assert response.status_code == 200
    report = client.get("/v2/models/risk/versions/1/drift").get_json()
    document = client.get("/openapi.json").get_json()
    operation = document["paths"]["/v2/models/{model}/versions/{version}/drift"]
    assert [p["name"] for p in operation["parameters"]] == ["model", "version"]
    assert sorted(operation["get"]["responses"]) == ["200", "404"]
    described = {"$ref": "#/components/schemas/DriftReport", "components": document["components"]}
    jsonschema.validate(report, described)  # the report is what the document says
    by_name = {f["name"]: f for f in report["fields"]}
    assert report["requests"] == 600
    assert by_name["b"]["psi"] > 0.25
    assert by_name["b"]["drifted"]
    assert by_name["a"]["psi"] < 0.1
    missing = client.get("/v2/models/risk/versions/2/drift")
    assert missing.status_code == 404
    assert "has no reference profile; build one with `servinglib profile" in missing.json["error"]
    assert client.get("/v2/models/risk/versions/7/drift").status_code == 404
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'servinglib_drift_psi{field="b",model="risk",role="feature",version="1"}' in metrics
    segments = [
        line
        for line in metrics.splitlines()
        if line.startswith("servinglib_drift_output_window_answers{") and 'output="segment"' in line
    ]
    assert sum(float(line.split()[-1]) for line in segments) == 600
    assert any('bin="_other"' in line for line in segments)
    app.extensions["servinglib.shutdown"]()  # flush the prediction log

    out = tmp_path / "report"
    code = main(["drift", "report", *common, "--version", "1", "--since", "1h", "--out", str(out)])
    assert code == 1  # a field drifted
    printed = capsys.readouterr().out
    assert '"requests": 600' in printed
    assert '"b"' in printed
    html = (out / "index.html").read_text()
    assert "DRIFTED" in html
    assert 'src="feature-b.png"' in html
    assert (out / "feature-b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "feature-a.png").exists()
    offline = json.loads((out / "drift.json").read_text())
    assert {f["name"]: f["psi"] for f in offline["fields"]} == {
        f["name"]: f["psi"] for f in report["fields"]
    }

    assert main(["profile", *common, "--version", "1", "--from-log", "1h", "--no-outputs"]) == 0
    relogged = profile_of(service, "1")
    assert relogged["source"] == "prediction log, last 3600 s"
    b = next(f for f in relogged["fields"] if f["name"] == "b")
    assert b["count"] == 600
    assert b["mean"] == pytest.approx(7, abs=0.3)  # the shifted traffic is the new reference


def test_open_inference_requests_are_monitored_too(service: Path, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "train.jsonl", rows(2000))
    argv = ["--config", str(service), "--model", "risk", "--version", "1", "--data", str(data)]
    assert main(["profile", *argv]) == 0
    client = create_app_from_config(service).test_client()
    for row in rows(200, seed=5):
        inputs = [
            {"name": name, "shape": [1], "datatype": "FP64", "data": [row[name]]}
            for name in ("a", "b", "c")
        ]
        inputs.append({"name": "city", "shape": [1], "datatype": "BYTES", "data": ["paris"]})
        response = client.post("/v2/models/risk/versions/1/infer", json={"inputs": inputs})
        assert response.status_code == 200, response.json
    report = client.get("/v2/models/risk/versions/1/drift").get_json()
    by_name = {f["name"]: f for f in report["fields"]}
    assert report["requests"] == 200
    assert by_name["a"]["samples"] == 200
    assert by_name["a"]["psi"] < 0.1
    assert (
        by_name["city"]["bins"]["live"][by_name["city"]["bins"]["categories"].index("paris")] == 200
    )
    for field in report["fields"]:  # tensors are read as their values, not as wrong types
        quality = field["quality"]
        assert (quality["missing"], quality["wrong_type"], quality["unseen_category"]) == (0, 0, 0)
    assert by_name["score"]["samples"] == 200
