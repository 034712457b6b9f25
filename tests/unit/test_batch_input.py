"""``servinglib batch-predict`` reads its input as a new user's files are: real CLI processes.

The fixture model asserts the types its ``input_schema`` declares, so a reader that hands it
``"12"`` for a number or ``1`` for a boolean fails these tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from servinglib.cli.main import main
from servinglib.serve.app import create_app_from_config

CONFIG = Path(__file__).parent.parent / "fixtures" / "batch_input" / "servinglib.yaml"
HEADER = "customer_id,minutes,calls,plan,active,churn\n"


def _batch(tmp_path: Path, source: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SERVINGLIB_TEST_LOAD_MARKER": str(tmp_path / "loaded")}
    command = [
        sys.executable,
        "-m",
        "servinglib.cli.main",
        "batch-predict",
        "--config",
        str(CONFIG),
    ]
    command += ["--model", "churn", "--input", str(source), "--output", str(tmp_path / "out")]
    command += ["--output-format", "jsonl", "--no-progress", *args]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=120, check=False
    )


def _rows(tmp_path: Path) -> list[dict[str, Any]]:
    parts = sorted((tmp_path / "out").glob("part-*.jsonl"))
    return [json.loads(line) for part in parts for line in part.read_text().splitlines()]


def _infer_error(features: dict[str, Any]) -> str:
    """What ``/infer`` answers for ``features`` (400), worded as a batch error row."""
    answer = (
        create_app_from_config(CONFIG)
        .test_client()
        .post("/infer", json={"model_id": "churn", "features": features})
    )
    assert answer.status_code == 400
    return f"invalid input: {answer.get_json()['error']}"


def test_csv_cells_get_their_declared_types_and_a_bad_cell_fails_only_its_row(
    tmp_path: Path,
) -> None:
    source = tmp_path / "in.csv"
    source.write_text(
        HEADER
        + "c1,100,2,basic,true,0\n"
        + "c2,twelve,1,pro,false,1\n"  # one bad cell: its row alone fails
        + "c3,5.5,3,007,FALSE,1\n"  # 007 stays a string, FALSE a boolean
        + "c4,7,,pro,true,0\n"  # an empty cell is a missing value
    )
    done = _batch(tmp_path, source, "--id-column", "customer_id", "--max-error-rate", "1")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "columns ['churn'] are not features of model 'churn'" in done.stderr
    rows = {row["customer_id"]: row for row in _rows(tmp_path)}
    assert rows["c1"] == {
        "customer_id": "c1",
        "score": 1.2,
        "plan": "basic",
        "model": "churn",
        "version": "1",
        "error": None,
    }
    assert rows["c2"]["error"] == _infer_error(
        {"minutes": "twelve", "calls": 1, "plan": "pro", "active": False}
    )
    assert (
        rows["c2"]["error"] == "invalid input: features.minutes: 'twelve' is not of type 'number'"
    )
    assert rows["c3"]["error"] is None
    assert rows["c3"]["plan"] == "007"
    assert rows["c3"]["score"] == pytest.approx(0.055 + 0.3 + 0.5)
    assert rows["c4"]["error"] == _infer_error({"minutes": 7, "plan": "pro", "active": True})


def test_json_lines_rows_fail_alone_with_the_messages_of_infer(tmp_path: Path) -> None:
    good = {"minutes": 100, "calls": 2, "plan": "basic", "active": True}
    lines = [
        {"customer_id": "c1", **good, "churn": 0},
        {"customer_id": "c2", **good, "minutes": "twelve"},  # the column changes type
        {"customer_id": "c3", "calls": 1, "plan": "pro", "active": False},  # no minutes
        {"customer_id": "c4", **good, "minutes": None},
        {"customer_id": "c5", **good, "calls": 2.5},
    ]
    source = tmp_path / "in.jsonl"
    text = "\n".join(json.dumps(line) for line in lines) + "\nnot json\n[1, 2]\n"
    source.write_text(text + '{"customer_id": "c8", "minutes": 3')  # a truncated last line
    done = _batch(tmp_path, source, "--id-column", "customer_id", "--max-error-rate", "1")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    rows = _rows(tmp_path)
    assert len(rows) == 8
    assert rows[0]["score"] == 1.2
    for row, line in zip(rows[1:5], lines[1:5], strict=True):
        assert row["error"] == _infer_error({k: v for k, v in line.items() if k != "customer_id"})
    assert rows[2]["error"] == "invalid input: features: 'minutes' is a required property"
    assert rows[5]["error"].startswith(f"invalid input: line 6 of {source} is not valid JSON")
    assert rows[6]["error"] == (
        f"invalid input: line 7 of {source} holds a JSON list, not an object of features"
    )
    assert rows[7]["error"].startswith(f"invalid input: line 8 of {source} is not valid JSON")


def test_a_missing_feature_column_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    source.write_text("customer_id,calls,plan,active\nc1,1,basic,true\n")
    done = _batch(tmp_path, source)
    assert done.returncode == 2
    assert done.stderr == (
        f"error: {source} has no column 'minutes', which model 'churn' requires "
        "(input_schema.required: ['active', 'calls', 'minutes', 'plan']); its columns are "
        "['customer_id', 'calls', 'plan', 'active']; add the column, or score with a model "
        "whose input_schema does not require it\n"
    )
    assert not (tmp_path / "loaded").exists()
    assert not (tmp_path / "out").exists()


def test_columns_chooses_the_features_and_names_what_is_missing(tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    source.write_text(HEADER + "c1,100,2,basic,true,0\n")
    done = _batch(tmp_path, source, "--columns", "minutes,calls,plan,active")
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
    assert [row["score"] for row in _rows(tmp_path)] == [1.2]
    refused = _batch(tmp_path, source, "--columns", "minutes,calls,plan", "--overwrite")
    assert refused.returncode == 2
    assert "no column 'active', which model 'churn' requires" in refused.stderr
    assert "add ['active'] to --columns" in refused.stderr
    unknown = _batch(tmp_path, source, "--columns", "minutes,seconds", "--overwrite")
    assert unknown.returncode == 2
    assert f"{source} has no column 'seconds' (--columns)" in unknown.stderr


def test_when_every_first_row_fails_the_job_stops_with_the_causes_before_writing(
    tmp_path: Path,
) -> None:
    source = tmp_path / "in.jsonl"
    row = {"minutes": "ten", "calls": 1, "plan": "basic", "active": True}
    source.write_text((json.dumps(row) + "\n") * 5000)
    done = _batch(tmp_path, source)
    assert done.returncode == 1
    assert done.stderr.startswith(
        f"error: all of the first 256 rows of {source} failed, so nothing was scored or "
        "written; the first causes:\n"
        "  row 1: invalid input: features.minutes: 'ten' is not of type 'number'\n"
    )
    assert not (tmp_path / "out").exists()


def _parquet(rows: dict[str, list[Any]]) -> Callable[[Path], Path]:
    def write(directory: Path) -> Path:
        pq.write_table(pa.table(rows), directory / "in.parquet")
        return directory / "in.parquet"

    return write


def _text(name: str, content: bytes) -> Callable[[Path], Path]:
    def write(directory: Path) -> Path:
        (directory / name).write_bytes(content)
        return directory / name

    return write


def _truncated_parquet(directory: Path) -> Path:
    path = _parquet({"minutes": [1.0] * 100, "calls": [1] * 100})(directory)
    path.write_bytes(path.read_bytes()[:300])
    return path


def _mixed_parquet_files(directory: Path) -> Path:
    good = {"minutes": [1.0], "calls": [1], "plan": ["a"], "active": [True]}
    pq.write_table(pa.table(good), directory / "a.parquet")
    bad = {"minutes": ["1"], "calls": [1.5], "plan": [2], "active": [1]}
    pq.write_table(pa.table(bad), directory / "b.parquet")
    return directory


ROW = b"1,2,basic,true\n"
HOSTILE: dict[str, tuple[Callable[[Path], Path], int]] = {
    # name: (the file, the exit code: 2 a file that cannot be read, 1 every first row failed,
    # 0 scored with error rows)
    "truncated parquet": (_truncated_parquet, 2),
    "empty parquet": (_text("in.parquet", b""), 2),
    "csv named parquet": (_text("in.parquet", b"minutes,calls\n1,2\n"), 2),
    "empty csv": (_text("in.csv", b""), 2),
    "binary csv": (_text("in.csv", bytes(range(256)) * 20), 2),
    "csv row with a cell too many": (
        _text("in.csv", b"minutes,calls,plan,active\n1,2,a,true,9\n"),
        2,
    ),
    "csv truncated mid-row": (_text("in.csv", b"minutes,calls,plan,active\n" + ROW + b"3,4"), 2),
    "csv of mistyped cells": (
        _text("in.csv", b"minutes,calls,plan,active\nx,1.5,a,yes\n" + ROW),
        0,
    ),
    "binary json lines": (_text("in.jsonl", bytes(range(256)) * 20), 2),
    "json lines of every type": (
        _text(
            "in.jsonl",
            b'{"minutes": 1}\n{"minutes": [1]}\n{"minutes": {"a": 1}}\n'
            b'{"minutes": true}\n{"minutes": 18446744073709551616}\n"text"\n'
            b'{"minutes": 1, "calls": 1, "plan": "a", "active": true}\n',
        ),
        0,
    ),
    "json lines truncated mid-row": (_text("in.jsonl", b'{"minutes": 1, "calls": 1, "pl'), 2),
    # --max-error-rate 1 writes every error row: the first rows failing do not stop it
    "json lines failing every row": (_text("in.jsonl", b'{"minutes": "1"}\n' * 300), 0),
    "parquet files of mixed types": (_mixed_parquet_files, 0),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_files_end_in_a_message_never_a_traceback(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # in this process (the CLI's own main): an exception escaping it is the traceback
    build, code = HOSTILE[name]
    (tmp_path / "data").mkdir()
    source = build(tmp_path / "data")
    args = ["batch-predict", "--config", str(CONFIG), "--model", "churn", "--input"]
    args += [str(source), "--output", str(tmp_path / "out"), "--no-progress"]
    returncode = main([*args, "--max-error-rate", "1"])
    stderr = capsys.readouterr().err
    assert returncode == code, stderr
    if code:
        assert stderr.startswith("error: ")
        assert str(source) in stderr
