"""servinglib.batch.predict end to end in this process: input rules, errors, parts, resume."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from servinglib.batch import BatchAbortedError, BatchJob, predict
from servinglib.errors import ConfigError, ModelNotReadyError
from servinglib.tabular import InputFileError

CONFIG = str(Path(__file__).parent.parent / "fixtures" / "batch" / "servinglib.yaml")


def _rows(n: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        extra: list[float] = [0.25] * (i % 3)
        if i == 7:
            extra = [math.nan]  # refused like a JSON request with NaN
        if i == 8:
            extra = [1.0, 1.0, 1.0, 1.0]  # maxItems 3
        rows.append({"id": f"r{i:04d}", "x": i, "extra": extra})  # x = 13 poisons its batch
    return rows


def _parquet(path: Path, rows: list[dict[str, Any]], row_group_size: int = 50) -> Path:
    schema = pa.schema([("id", pa.string()), ("x", pa.int64()), ("extra", pa.list_(pa.float64()))])
    pq.write_table(pa.Table.from_pylist(rows, schema), path, row_group_size=row_group_size)
    return path


def _job(tmp_path: Path, source: Path, **options: Any) -> BatchJob:
    # scored in this process: worker processes and call timeouts are tested as commands
    options = {
        "id_column": "id",
        "max_error_rate": 0.5,
        "progress": False,
        "call_timeout_s": 0,
        **options,
    }
    return BatchJob(CONFIG, "summer", str(source), str(tmp_path / "out"), **options)


def test_every_row_is_scored_once_in_order_with_its_error(tmp_path: Path) -> None:
    source = _parquet(tmp_path / "in.parquet", _rows(200))
    summary = predict(_job(tmp_path, source))
    table = pq.read_table(tmp_path / "out")
    assert (summary.rows, summary.errors) == (200, 3)
    assert table.column("id").to_pylist() == [f"r{i:04d}" for i in range(200)]
    rows = {r["id"]: r for r in table.to_pylist()}
    assert rows["r0005"]["total"] == 5 + 0.5 + 0.5
    assert rows["r0005"]["tag"] == "odd"
    assert json.loads(rows["r0005"]["detail"]) == {"x": 5, "n": 2}
    assert rows["r0005"]["error"] is None
    assert rows["r0005"]["version"] == "1"
    assert "features.extra holds NaN or Infinity" in rows["r0007"]["error"]
    assert rows["r0008"]["error"].startswith("invalid input: features.extra: ")
    # one poison row fails alone; its 63 batch neighbours are answered
    assert rows["r0013"]["error"] == "prediction failed: ValueError: 13 is unlucky"
    assert rows["r0013"]["total"] is None
    assert rows["r0014"]["error"] is None
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["complete"]
    assert manifest["rows"] == 200
    assert len(manifest["files"]) == 4


def test_a_version_failing_its_self_tests_scores_nothing(tmp_path: Path) -> None:
    source = _parquet(tmp_path / "in.parquet", _rows(10))
    with pytest.raises(ModelNotReadyError, match="self-test 'two plus extras' failed"):
        predict(_job(tmp_path, source, version="2"))
    assert not (tmp_path / "out").exists()


def test_resume_scores_only_the_missing_parts(tmp_path: Path) -> None:
    source = _parquet(tmp_path / "in.parquet", _rows(200))
    predict(_job(tmp_path, source))
    full = pq.read_table(tmp_path / "out")
    kept = (tmp_path / "out" / "part-00000.parquet").stat().st_mtime_ns
    (tmp_path / "out" / "part-00002.parquet").unlink()
    (tmp_path / "out" / ".part-00002.parquet.999.tmp").write_bytes(b"half a part")
    summary = predict(_job(tmp_path, source, resume=True))
    assert summary.resumed_rows == 150
    assert summary.rows == 200
    assert (tmp_path / "out" / "part-00000.parquet").stat().st_mtime_ns == kept
    assert pq.read_table(tmp_path / "out").equals(full)
    assert not list((tmp_path / "out").glob(".part-*"))


def test_resume_refuses_a_different_job_and_a_used_directory_needs_a_flag(tmp_path: Path) -> None:
    source = _parquet(tmp_path / "in.parquet", _rows(60))
    predict(_job(tmp_path, source))
    with pytest.raises(ConfigError, match="pass --resume to finish it or --overwrite"):
        predict(_job(tmp_path, source))
    with pytest.raises(ConfigError, match=r"the job changed in \['batch_size'\]"):
        predict(_job(tmp_path, source, resume=True, batch_size=7))
    assert predict(_job(tmp_path, source, overwrite=True, batch_size=7)).rows == 60


def test_too_many_error_rows_stop_the_job(tmp_path: Path) -> None:
    source = _parquet(tmp_path / "in.parquet", _rows(60))
    with pytest.raises(
        BatchAbortedError, match=r"3 of 60 rows failed, more than --max-error-rate 0\.01"
    ):
        predict(_job(tmp_path, source, max_error_rate=0.01))


def test_csv_in_json_lines_out_and_a_json_features_column(tmp_path: Path) -> None:
    table = pa.table(
        {"id": [1, 2, 3], "features": ['{"x": 1}', '{"x": -1}', '{"x": 4, "extra": [2]}']}
    )
    pacsv.write_csv(table, tmp_path / "in.csv")
    job = _job(tmp_path, tmp_path / "in.csv", features_column="features", output_format="jsonl")
    with pytest.raises(BatchAbortedError, match="1 of 3 rows failed"):
        predict(BatchJob(**{**job.__dict__, "max_error_rate": 0.1}))
    predict(BatchJob(**{**job.__dict__, "overwrite": True}))
    lines = [
        json.loads(line)
        for line in (tmp_path / "out" / "part-00000.jsonl").read_text().splitlines()
    ]
    assert [line["id"] for line in lines] == [1, 2, 3]
    assert lines[0]["total"] == 1.5
    assert lines[2]["total"] == 6.5
    assert lines[1]["error"].startswith("invalid input: features.x: -1 is less than the minimum")


def test_inputs_json_cannot_carry_are_refused_up_front(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": ["a"], "x": pa.array([1], pa.timestamp("s"))}), path)
    with pytest.raises(ConfigError, match="column 'x' has type timestamp"):
        predict(_job(tmp_path, path))
    with pytest.raises(ConfigError, match="no column 'key'"):
        predict(_job(tmp_path, path, id_column="key"))


def test_the_ray_engine_without_ray_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    source = _parquet(tmp_path / "in.parquet", _rows(10))
    with pytest.raises(ConfigError, match=r"pip install 'servinglib\[ray\]'"):
        predict(_job(tmp_path, source, engine="ray"))


def test_a_tensor_runtime_prepares_whole_chunks_and_a_bad_row_fails_alone(tmp_path: Path) -> None:
    import numpy as np
    from optimize_models import regressor_rows, write_regressor

    from servinglib.config.spec import load_config
    from servinglib.lifecycle.registry import ModelRegistry

    version = tmp_path / "models" / "eta" / "1"
    version.mkdir(parents=True)
    write_regressor(version / "model.onnx")
    import onnxruntime

    case = regressor_rows(1, seed=2)
    eta = onnxruntime.InferenceSession(str(version / "model.onnx")).run(None, {"x": case})[0]
    (version / "test_data.json").write_text(
        json.dumps({"cases": [{"input": {"x": case.tolist()}, "expected": {"eta": eta.tolist()}}]})
    )
    config = tmp_path / "servinglib.yaml"
    config.write_text(
        "service: s\nmodels:\n  - name: eta\n    runtime: onnx\n    repository: models/eta\n"
        "    default_version: '1'\n    runtime_options: {intra_op_threads: 1}\n"
    )
    x = regressor_rows(300, seed=1).astype(np.float64)
    x[123, 5] = 1e300  # finite for JSON and Arrow, infinite as the model's FP32
    rows = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 16)
    source = tmp_path / "in.parquet"
    pq.write_table(
        pa.table({"id": np.arange(300), "x": pa.ListArray.from_arrays(np.arange(301), rows)}),
        source,
        row_group_size=150,
    )
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    instance = registry.record("eta", "1").instance
    assert instance is not None
    for numpy_lists in (True, False):
        out = tmp_path / f"out-{numpy_lists}"
        job = BatchJob(
            str(config),
            "eta",
            str(source),
            str(out),
            id_column="id",
            progress=False,
            call_timeout_s=0,
        )
        summary = predict(BatchJob(**{**job.__dict__, "numpy_lists": numpy_lists}))
        assert (summary.rows, summary.errors) == (300, 1)
        table = pq.read_table(out).to_pylist()
        assert table[123]["error"].startswith("invalid input: input 'x' of model 'eta'")
        assert "NaN or Infinity" in table[123]["error"]
        assert table[123]["eta"] is None
        for i in (0, 122, 124, 299):  # as one request each would be answered
            want = instance.predict({"x": [x[i].tolist()]})["eta"].tolist()
            assert table[i]["eta"][0] == pytest.approx(want[0], rel=1e-6)
            assert table[i]["error"] is None


def test_units_stream_through_one_pipeline_and_a_failed_unit_is_named(tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.csv").write_text("id,x\n1,1\n2,2\n")
    (inputs / "b.csv").write_text("id,x\n")  # no rows: its part is written all the same
    (inputs / "c.csv").write_text("id,x\n3,3\n")
    summary = predict(_job(tmp_path, inputs))
    assert summary.rows == 3
    parts = sorted(p.name for p in (tmp_path / "out").glob("part-*"))
    assert parts == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert pq.read_table(tmp_path / "out" / "part-00001.parquet").num_rows == 0
    assert pq.read_table(tmp_path / "out").column("id").to_pylist() == [1, 2, 3]

    # a row with a column too many, past the first block (the header check reads only that)
    (inputs / "c.csv").write_text("id,x\n" + "3,3\n" * 20_000 + "4,4,4\n")
    with pytest.raises(
        InputFileError, match=r"c\.csv: cannot read it as csv \(CSV parse error: Expected 2"
    ):
        predict(_job(tmp_path, inputs, overwrite=True))
    kept = sorted(p.name for p in (tmp_path / "out").glob("part-*"))
    assert kept == ["part-00000.parquet", "part-00001.parquet"]  # written before the failure
    assert not list((tmp_path / "out").glob(".part-*"))
