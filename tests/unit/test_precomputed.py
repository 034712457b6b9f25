"""runtime: precomputed: rows by key from Parquet or SQLite, misses to the fallback version."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from servinglib.errors import InvalidInputError, ModelLoadError
from servinglib.model import ModelSettings
from servinglib.runtimes.precomputed import PrecomputedModel

FIXTURE = Path(__file__).parent.parent / "fixtures" / "batch"


def _model(version_dir: Path, **options: object) -> PrecomputedModel:
    model = PrecomputedModel()
    model.configure(
        ModelSettings("scores", version_dir.name, runtime_options={"key": "id", **options})
    )
    model.load(version_dir)
    return model


def _sqlite(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE predictions (id INTEGER, total REAL, detail JSON, error TEXT)")
        db.executemany(
            "INSERT INTO predictions VALUES (?, ?, ?, ?)",
            [(1, 1.5, '{"x": 1}', None), (2, None, None, "prediction failed: ValueError: no")],
        )
    db.close()


def test_sqlite_rows_answer_by_key_and_error_rows_count_as_misses(tmp_path: Path) -> None:
    version = tmp_path / "nightly"
    version.mkdir()
    _sqlite(version / "scores.sqlite")
    model = _model(version, file="scores.sqlite")
    assert model.predict({"id": 1}) == {"total": 1.5, "detail": {"x": 1}}
    with pytest.raises(InvalidInputError, match="no precomputed prediction for id=2"):
        model.predict({"id": 2})
    with pytest.raises(InvalidInputError, match="features must hold 'id'"):
        model.predict({"other": 1})
    assert (model.hits, model.misses) == (1, 1)


def test_parquet_misses_go_to_the_fallback_version_in_one_batch(tmp_path: Path) -> None:
    repository = tmp_path / "summer"
    shutil.copytree(FIXTURE / "models" / "summer" / "1", repository / "1")
    (repository / "nightly").mkdir()
    table = pa.table(
        {
            "id": [10, 11],
            "total": [99.0, None],
            "detail": ['{"x": 10}', None],
            "error": [None, "invalid input: features.x: -1 is less than the minimum of 0"],
        },
        metadata={b"servinglib.json_columns": json.dumps(["detail"]).encode()},
    )
    pq.write_table(table, repository / "nightly" / "predictions.parquet")
    model = _model(
        repository / "nightly",
        file="predictions.parquet",
        fallback_version="1",
        fallback_class="models/summer/model.py:SummerModel",
        config_root=str(FIXTURE),
    )
    answers = model.predict_batch([{"id": 10, "x": 10}, {"id": 11, "x": 3}, {"id": 12, "x": 4}])
    assert answers[0] == {"total": 99.0, "detail": {"x": 10}}
    assert answers[1]["total"] == 3.5  # live: x + offset 0.5 of version 1
    assert answers[2]["tag"] == "even"
    assert (model.hits, model.misses) == (1, 2)


def test_a_missing_file_or_fallback_class_fails_the_load(tmp_path: Path) -> None:
    version = tmp_path / "nightly"
    version.mkdir()
    with pytest.raises(ModelLoadError, match="copy the output directory of servinglib"):
        _model(version)
    _sqlite(version / "scores.db")
    with pytest.raises(ModelLoadError, match=r"needs runtime_options\.fallback_class"):
        _model(version, file="scores.db", fallback_version="1")
