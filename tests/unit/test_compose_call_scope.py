"""A composed request's steps inherit its request id, priority and routing key, in one scope.

Driven in process over the composition service with a SQLite prediction log: the rows a
pipeline's steps write carry ``<parent id>.<step>``, and a step's deferred work joins the
parent's, so nothing runs before the parent's answer is given.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import yaml

from benchmarks.composition_service import composition_service
from servinglib.serving.assembly import load_worker
from servinglib.serving.service import InferenceRequest, run_followups

VALUES = [1.0, 2.0, 3.0, 4.0]


def service_with_log(tmp_path: Path) -> tuple[Path, Path]:
    config = composition_service(tmp_path / "service")
    raw = yaml.safe_load(config.read_text())
    database = tmp_path / "predictions.db"
    raw["monitoring"] = {
        "prediction_log": {"url": f"sqlite:///{database}", "flush_interval_ms": 50}
    }
    config.write_text(yaml.safe_dump(raw))
    return config, database


def logged(database: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT request_id, model, version FROM predictions").fetchall()
    return sorted(rows)


def test_pipeline_steps_log_the_parent_request_id_on_both_paths(tmp_path: Path) -> None:
    config, database = service_with_log(tmp_path)
    worker = load_worker(config)
    try:
        request = InferenceRequest("classify", {"values": VALUES}, version="1", request_id="r-sync")
        assert worker.service.infer(request).output["score"] == 6.0

        async def on_the_loop() -> None:
            request = InferenceRequest(
                "classify", {"values": VALUES}, version="1", request_id="r-async"
            )
            answer = await worker.service.infer_async(request)
            assert answer.output["score"] == 6.0

        asyncio.run(on_the_loop())
    finally:
        worker.close()
    rows = logged(database)
    for parent in ("r-sync", "r-async"):
        assert (parent, "classify", "1") in rows
        assert (f"{parent}.scale", "prep", "1") in rows
        assert (f"{parent}.project", "linear", "1") in rows
        assert any(r[0] == f"{parent}.decide" and r[1] == "head" for r in rows)
    assert not [r for r in rows if not r[0]], "a row without a request id"


def deferred_work(config: Path, request_id: str) -> tuple[int, list[Callable[[], None]]]:
    """How many pieces of work one pipeline request leaves for after its answer."""
    worker = load_worker(config)
    later: list[Callable[[], None]] = []
    try:
        request = InferenceRequest(
            "classify", {"values": VALUES}, version="1", request_id=request_id
        )
        worker.service.infer(request, later)
        count = len(later)
        run_followups(later)
    finally:
        worker.close()
    return count, later


def test_a_member_shadow_waits_for_the_parent_answer(tmp_path: Path) -> None:
    config, database = service_with_log(tmp_path)
    without, _ = deferred_work(config, "plain")
    raw = yaml.safe_load(config.read_text())
    for model in raw["models"]:
        if model["name"] == "prep":
            model["shadow"] = [{"version": "2", "comparator": {"kind": "exact"}}]
    config.write_text(yaml.safe_dump(raw))
    with_shadow, _ = deferred_work(config, "shadowed")
    # the parent's copy and one per step (scale, project, decide) wait for the parent's answer
    assert without == with_shadow == 4
    with sqlite3.connect(database) as connection:
        shadows = connection.execute(
            "SELECT request_id, version, shadow_of FROM predictions WHERE model = 'prep' "
            "AND shadow_of IS NOT NULL"
        ).fetchall()
    assert shadows == [("shadowed.scale", "2", "1")]
