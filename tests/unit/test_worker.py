"""servinglib.serving.assembly: one worker process assembled from a config, served and closed."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from servinglib.config.spec import load_config
from servinglib.http.app import create_app
from servinglib.serving.assembly import build_worker
from servinglib.serving.service import InferenceRequest


def test_a_worker_serves_its_models_and_close_flushes_the_prediction_log(
    service_config: Path, tmp_path: Path
) -> None:
    service = tmp_path / "service"
    shutil.copytree(service_config.parent, service)
    database = tmp_path / "predictions.db"
    config = service / "servinglib.yaml"
    config.write_text(
        config.read_text() + f"monitoring:\n  prediction_log:\n    url: sqlite:///{database}\n"
    )
    worker = build_worker(load_config(config, environ={}))
    try:
        prediction = worker.service.infer(InferenceRequest("scorer", {"x": 2.0}, request_id="r1"))
        assert (prediction.version, prediction.output) == ("2", {"score": 6.0})
        response = (
            create_app(worker.service, worker.metrics)
            .test_client()
            .post("/infer", json={"model_id": "scorer", "features": {"x": 1.0}})
        )
        assert response.status_code == 200
    finally:
        worker.close()
    with sqlite3.connect(database) as db:
        ids = {row[0] for row in db.execute("SELECT request_id FROM predictions")}
    assert "r1" in ids
    assert len(ids) == 2


def test_the_prediction_log_keys_an_open_inference_request_on_its_x_request_id(
    service_config: Path, tmp_path: Path
) -> None:
    service = tmp_path / "service"
    shutil.copytree(service_config.parent, service)
    database = tmp_path / "predictions.db"
    config = service / "servinglib.yaml"
    config.write_text(
        config.read_text() + f"monitoring:\n  prediction_log:\n    url: sqlite:///{database}\n"
    )
    worker = build_worker(load_config(config, environ={}))
    tensor = {"name": "x", "shape": [1], "datatype": "FP64", "data": [1.0]}
    try:
        response = (
            create_app(worker.service, worker.metrics)
            .test_client()
            .post(
                "/v2/models/echo/infer",
                json={"id": "body-id\twith a tab", "inputs": [tensor]},
                headers={"x-request-id": "edge-1"},
            )
        )
        assert response.status_code == 400  # a control character in the id
        response = (
            create_app(worker.service, worker.metrics)
            .test_client()
            .post(
                "/v2/models/echo/infer",
                json={"id": "body-id", "inputs": [tensor]},
                headers={"x-request-id": "edge-2"},
            )
        )
        assert response.status_code == 200
        assert response.get_json()["id"] == "body-id"
        assert response.headers["x-request-id"] == "edge-2"
    finally:
        worker.close()
    with sqlite3.connect(database) as db:
        ids = [row[0] for row in db.execute("SELECT request_id FROM predictions")]
    assert ids == ["edge-2"]
