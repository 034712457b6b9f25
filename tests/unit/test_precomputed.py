"""runtime: precomputed: rows by key from Parquet or SQLite, misses through the fallback's lane."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from servinglib.checks.selftests import run_all_selftests
from servinglib.compose.calls import LaneCaller
from servinglib.config.spec import load_config
from servinglib.errors import ConfigError, InvalidInputError, ModelLoadError
from servinglib.lifecycle.registry import ModelRegistry, VersionState
from servinglib.model import PRECOMPUTED_LOOKUP, ModelSettings
from servinglib.runtimes._lookup import request_key
from servinglib.runtimes.precomputed import PrecomputedModel
from servinglib.serving.service import InferenceRequest, InferenceService

FIXTURE = Path(__file__).parent.parent / "fixtures" / "batch"


def _model(version_dir: Path, **options: object) -> PrecomputedModel:
    model = PrecomputedModel()
    model.configure(
        ModelSettings("scores", version_dir.name, runtime_options={"key": "id", **options})
    )
    model.load(version_dir)
    return model


def _sqlite(path: Path, rows: list[tuple[Any, ...]] | None = None) -> None:
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE predictions (id INTEGER, total REAL, detail JSON, flagged BOOLEAN, "
            "error TEXT)"
        )
        db.executemany(
            "INSERT INTO predictions VALUES (?, ?, ?, ?, ?)",
            rows
            or [
                (1, 1.5, '{"x": 1}', 1, None),
                (2, None, None, None, "prediction failed: ValueError: no"),
            ],
        )
    db.close()


def test_sqlite_rows_answer_by_key_with_json_and_booleans_decoded(tmp_path: Path) -> None:
    version = tmp_path / "nightly"
    version.mkdir()
    _sqlite(version / "scores.sqlite")
    model = _model(version, file="scores.sqlite")
    answer = model.predict({"id": 1})
    assert answer == {"total": 1.5, "detail": {"x": 1}, "flagged": True}
    assert answer["flagged"] is True  # BOOLEAN columns come back as booleans, not 1
    assert model.predict({"id": np.array([1], dtype=np.int64)}) == answer  # an Open Inference key
    with pytest.raises(InvalidInputError, match="no precomputed prediction for id=2"):
        model.predict({"id": 2})
    with pytest.raises(InvalidInputError, match="features must hold 'id'"):
        model.predict({"other": 1})
    assert (model.hits, model.misses) == (2, 1)
    assert [spec.datatype for spec in model.inputs] == ["INT64"]  # the v2 metadata's input


@pytest.mark.parametrize(
    ("key", "said"),
    [
        (True, "not a boolean"),
        ([1], "not a list"),
        ({"a": 1}, "not an object"),
        (None, "not null"),
        (2**64, "beyond the 64-bit integers"),
        (-(2**63) - 1, "beyond the 64-bit integers"),
        (float("nan"), "send a finite key"),
        (float("inf"), "send a finite key"),
        ("1", "not the string '1'"),
        (1.5, "holds integers"),
        (np.array([1, 2]), "send one key per request"),
        (np.array([True]), "not a boolean"),
    ],
)
def test_a_key_no_row_could_hold_is_refused_by_name(tmp_path: Path, key: Any, said: str) -> None:
    version = tmp_path / "nightly"
    version.mkdir()
    _sqlite(version / "scores.db")
    model = _model(version, file="scores.db")
    with pytest.raises(InvalidInputError, match=said) as raised:
        model.predict({"id": key})
    assert raised.value.field == "id"
    assert model.misses == 0  # refused, never looked up


def test_string_keys_match_strings_and_bytes_tensors_only() -> None:
    assert request_key(np.array([b"ab-1"], dtype=object), "id", "string") == "ab-1"
    assert request_key(np.array(["ab-1"]), "id", "string") == "ab-1"
    assert request_key(3.0, "id", "integer") == 3
    with pytest.raises(InvalidInputError, match="must be a string"):
        request_key(1, "id", "string")
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        request_key(b"\xff", "id", "string")


def test_string_keys_answer_json_strings_and_bytes_tensors(tmp_path: Path) -> None:
    version = tmp_path / "nightly"
    version.mkdir()
    table = pa.table({"id": ["ab-1", "1"], "total": [1.0, 2.0]})
    pq.write_table(table, version / "predictions.parquet")
    model = _model(version, file="predictions.parquet")
    assert [(spec.name, spec.datatype) for spec in model.inputs] == [("id", "BYTES")]
    assert model.predict({"id": "ab-1"}) == {"total": 1.0}
    assert model.predict({"id": np.array([b"ab-1"], dtype=np.object_)}) == {"total": 1.0}
    assert model.predict({"id": "1"}) == {"total": 2.0}
    with pytest.raises(InvalidInputError, match="must be a string"):
        model.predict({"id": 1})  # the number 1 is not the key "1"


def test_duplicate_keys_across_parts_fail_the_load(tmp_path: Path) -> None:
    parts = tmp_path / "nightly" / "predictions"
    parts.mkdir(parents=True)
    pq.write_table(pa.table({"id": [1, 2], "total": [1.0, 2.0]}), parts / "part-0.parquet")
    pq.write_table(pa.table({"id": [2, 3], "total": [9.0, 3.0]}), parts / "part-1.parquet")
    with pytest.raises(ModelLoadError, match=r"held by more than one row \(e\.g\. \[2\]\)"):
        _model(tmp_path / "nightly")
    version = tmp_path / "sqlite"
    version.mkdir()
    _sqlite(version / "scores.db", [(1, 1.0, None, 0, None), (1, 2.0, None, 0, None)])
    with pytest.raises(ModelLoadError, match="held by more than one row"):
        _model(version, file="scores.db")


def test_a_missing_file_fails_the_load(tmp_path: Path) -> None:
    version = tmp_path / "nightly"
    version.mkdir()
    with pytest.raises(ModelLoadError, match="copy the output directory of servinglib"):
        _model(version)


def _precomputed_service(tmp_path: Path, options: str) -> Path:
    """The batch fixture plus ``summer-nightly``, precomputed over a Parquet table."""
    service = tmp_path / "service"
    shutil.copytree(FIXTURE, service)
    nightly = service / "models" / "summer" / "nightly"
    nightly.mkdir()
    table = pa.table(
        {
            "id": [10, 11],
            "total": [99.0, None],
            "tag": ["even", None],
            "detail": ['{"x": 10}', None],
            "error": [None, "invalid input: features.x: -1 is less than the minimum of 0"],
        },
        metadata={b"servinglib.json_columns": json.dumps(["detail"]).encode()},
    )
    pq.write_table(table, nightly / "predictions.parquet")
    case = {"name": "hit", "input": {"id": 10}, "expected": {"total": 99.0, "tag": "even"}}
    case["expected"]["detail"] = {"x": 10}
    (nightly / "test_data.json").write_text(json.dumps({"cases": [case]}))
    config = service / "servinglib.yaml"
    config.write_text(
        config.read_text()
        + "  - name: summer-nightly\n    runtime: precomputed\n    repository: models/summer\n"
        + "    versions: [nightly]\n    default_version: nightly\n"
        + f"    runtime_options: {{key: id, file: predictions.parquet, {options}}}\n"
    )
    return config


def test_misses_go_through_the_fallback_models_lane(tmp_path: Path) -> None:
    config = load_config(_precomputed_service(tmp_path, 'fallback_version: "1"'), environ={})
    assert config.models[1].runtime_options["fallback_model"] == "summer"  # same repository
    registry = ModelRegistry(config)
    service = InferenceService(registry)
    registry.load_all(LaneCaller(service))
    assert registry.record("summer-nightly", "nightly").state is VersionState.READY

    def infer(features: Any) -> Any:
        PRECOMPUTED_LOOKUP.set(None)
        output = service.infer(InferenceRequest("summer-nightly", features)).output
        return output, PRECOMPUTED_LOOKUP.get()

    assert infer({"id": 10, "x": 10}) == (
        {"total": 99.0, "tag": "even", "detail": {"x": 10}},
        "hit",
    )
    answer, lookup = infer({"id": 11, "x": 3})  # an error row is a miss
    assert (answer["total"], lookup) == (3.5, "miss")  # live: x + offset 0.5 of version 1
    # the fallback's input_schema applies to a miss, as on /infer and in batch
    with pytest.raises(InvalidInputError, match=r"features\.x: -2 is less than the minimum of 0"):
        infer({"id": 12, "x": -2})
    with pytest.raises(InvalidInputError, match="holds only the key"):
        infer({"id": 12})
    tensors = {"id": np.array([12]), "x": np.array([4])}  # an Open Inference miss
    live = service.infer(InferenceRequest("summer-nightly", tensors, tensors=True)).output
    assert live["tag"] == "even"
    summer = registry.record("summer", "1")
    assert summer.state is VersionState.READY


def test_fallback_models_are_checked_when_the_config_loads(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="fallback_model 'ghost' is not a model"):
        load_config(_precomputed_service(tmp_path / "a", "fallback_model: ghost"), environ={})
    config = _precomputed_service(tmp_path / "b", 'fallback_version: "3"')  # no such version
    with pytest.raises(ConfigError, match="fallback_version '3' of 'models/summer' is a version"):
        load_config(config, environ={})


def test_a_failed_fallback_fails_the_precomputed_version(tmp_path: Path) -> None:
    config_path = _precomputed_service(tmp_path, 'fallback_model: summer, fallback_version: "2"')
    records = {
        (r.model, r.version): r for r in run_all_selftests(load_config(config_path, environ={}))
    }
    failed = records["summer-nightly", "nightly"]
    assert failed.state is VersionState.FAILED
    assert "step 'fallback' cannot run: model 'summer' version '2' is FAILED" in failed.reason
