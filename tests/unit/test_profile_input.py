"""``servinglib profile`` reads data as ``batch-predict`` does: real CLI processes.

Fields come from the model's declared inputs (ids and labels are not profiled), cells get
the declared types, a missing feature column is refused clearly, and the version answers
the rows in batches, with a progress bar.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

FIXTURE = Path(__file__).parent.parent / "fixtures" / "batch_input"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A copy of the churn service: profile writes profile.json into the version directory."""
    shutil.copytree(FIXTURE, tmp_path / "service")
    return tmp_path / "service" / "servinglib.yaml"


def _profile(config: Path, data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SERVINGLIB_TEST_BATCH_LOG": str(config.parent / "batches.log")}
    command = [sys.executable, "-m", "servinglib.cli.main", "profile", "--config", str(config)]
    command += ["--model", "churn", "--version", "1", "--data", str(data), *args]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=120, check=False
    )


def _fields(config: Path) -> dict[tuple[str, str], dict[str, Any]]:
    document = json.loads((config.parent / "models/churn/1/profile.json").read_text())
    return {(f["role"], f["name"]): f for f in document["fields"]}


def test_profile_reads_declared_features_with_their_types_in_batches(
    config: Path, tmp_path: Path
) -> None:
    data = tmp_path / "train.csv"
    rows = [
        f"c{i},{10 * (i % 7)},{i % 3},{'basic' if i % 2 else 'pro'},{'true' if i % 4 else 'false'},"
        f"{i % 2}"
        for i in range(100)
    ]
    data.write_text("customer_id,minutes,calls,plan,active,churn\n" + "\n".join(rows) + "\n")
    done = _profile(config, data)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "columns ['customer_id', 'churn'] are not features of model 'churn'" in done.stderr
    assert "predicting: 100%" in done.stderr  # the progress bar
    fields = _fields(config)
    assert set(fields) == {
        ("feature", "minutes"),
        ("feature", "calls"),
        ("feature", "plan"),
        ("feature", "active"),
        ("output", "score"),
        ("output", "plan"),
    }
    # the types batch-predict reads: a boolean, not the text "true"; an integer, not 1.0
    assert fields[("feature", "active")]["categories"] == ["true", "false"]
    assert fields[("feature", "calls")]["kind"] == "numeric"
    assert fields[("feature", "calls")]["null_share"] == 0.0
    assert fields[("output", "score")]["count"] == 100  # every row answered
    # the model asserts the types it is handed; rows arrived in batches of max_batch_size 32
    sizes = [int(n) for n in (config.parent / "batches.log").read_text().split()]
    assert sizes[-4:] == [32, 32, 32, 4]


def test_a_missing_feature_column_is_refused_in_one_line(config: Path, tmp_path: Path) -> None:
    data = tmp_path / "train.csv"
    data.write_text("customer_id,calls,plan,active\nc1,1,basic,true\n")
    done = _profile(config, data)
    assert done.returncode == 2
    assert done.stderr == (
        f"error: {data} has no column 'minutes', which model 'churn' requires "
        "(input_schema.required: ['active', 'calls', 'minutes', 'plan']); its columns are "
        "['customer_id', 'calls', 'plan', 'active']; add the column, or score with a model "
        "whose input_schema does not require it\n"
    )
    assert not (config.parent / "models/churn/1/profile.json").exists()


def test_a_bad_cell_costs_its_row_output_only(config: Path, tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    good = {"minutes": 10, "calls": 1, "plan": "basic", "active": True}
    lines = [good] * 9 + [{**good, "minutes": "twelve"}]
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = _profile(config, data, "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "predicting" not in done.stderr
    assert (
        "1 of 10 rows failed and have no output (row 10: invalid input: features.minutes: "
        "'twelve' is not of type 'number')" in done.stderr
    )
    fields = _fields(config)
    assert fields[("output", "score")]["count"] == 9
    assert fields[("feature", "minutes")]["null_share"] == pytest.approx(0.1)
