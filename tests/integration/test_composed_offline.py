"""Composed models scored and profiled offline, loaded by the same assembly as a worker.

``batch-predict`` and ``profile`` load a ``pipeline:`` or ``ensemble:`` model after the
models it calls, so its rows answer as ``/infer`` does on a real server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests

from benchmarks.composition_service import composition_service
from tests.conftest import LiveServer, launch, run_cli, stop

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, LiveServer]]:
    directory = tmp_path_factory.mktemp("composed-offline")
    config = composition_service(directory / "service")
    live = launch(config, directory)
    yield config, live
    stop(live.process)


CASES = {
    # model, input column, rows
    "classify": ("values", [[float(i % 7), 1.0, float(i % 3), 2.0] for i in range(40)]),
    "vote-rest": ("x", [float(i) for i in range(40)]),
}


def _scored(output: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for part in sorted(output.glob("*.parquet")):
        rows.extend(pq.read_table(part).to_pylist())
    return sorted(rows, key=lambda row: row["id"])


@pytest.mark.parametrize("model", sorted(CASES))
def test_batch_predict_of_a_composed_model_answers_as_infer(
    model: str, service: tuple[Path, LiveServer], tmp_path: Path
) -> None:
    config, live = service
    column, values = CASES[model]
    table = pa.Table.from_pylist([{"id": i, column: v} for i, v in enumerate(values)])
    pq.write_table(table, tmp_path / "in.parquet")
    result = run_cli(
        "batch-predict", "--config", str(config), "--model", model, "--version", "1",
        "--input", str(tmp_path / "in.parquet"), "--output", str(tmp_path / "out"),
        "--id-column", "id", "--columns", column, "--no-progress",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    scored = _scored(tmp_path / "out")
    assert [row["id"] for row in scored] == list(range(len(values)))
    assert all(row["error"] is None for row in scored), scored[:3]
    for row in scored[::7]:  # sampled rows, each asked of the live server
        body = {"model_id": model, "version": "1", "features": {column: values[row["id"]]}}
        answer = requests.post(f"{live.url}/infer", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        served = answer.json()["output"]
        assert {k: row[k] for k in served} == served, (row, served)


@pytest.mark.parametrize("model", sorted(CASES))
def test_profile_of_a_composed_model_includes_its_outputs(
    model: str, service: tuple[Path, LiveServer], tmp_path: Path
) -> None:
    config, _ = service
    column, values = CASES[model]
    pq.write_table(pa.Table.from_pylist([{column: v} for v in values]), tmp_path / "in.parquet")
    result = run_cli(
        "profile", "--config", str(config), "--model", model, "--version", "1",
        "--data", str(tmp_path / "in.parquet"), "--columns", column,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    written = Path(result.stdout.strip().splitlines()[-1].rsplit(" written to ", 1)[1])
    profile = json.loads(written.read_text(encoding="utf-8"))
    names = {(f["role"], f["name"]) for f in profile["fields"]}
    assert ("feature", column) in names
    assert ("output", "score") in names, names
