"""The batch-scoring example: every generated row is scored as predict() would score it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from servinglib.batch import BatchJob, predict
from servinglib.testing import import_file

EXAMPLE = Path(__file__).resolve().parent.parent
batch_score: Any = import_file(EXAMPLE / "batch_score.py")
model_module: Any = import_file(EXAMPLE / "models" / "breast_cancer" / "model.py")


def test_batch_scores_equal_predict_row_by_row(tmp_path: Path) -> None:
    source = batch_score.write_rows(tmp_path / "patients.parquet", 3000)
    summary = predict(
        BatchJob(
            str(EXAMPLE / "servinglib.yaml"), "breast-cancer", str(source), str(tmp_path / "out"),
            id_column="id", numpy_lists=True, progress=False,
        )
    )  # fmt: skip
    assert (summary.rows, summary.errors) == (3000, 0)
    scores = pq.read_table(tmp_path / "out").to_pylist()
    inputs = pq.read_table(source).to_pylist()
    model = model_module.BreastCancerClassifier()
    model.load(EXAMPLE / "models" / "breast_cancer" / "2")
    for i in np.random.default_rng(1).integers(0, 3000, 20):
        expected = model.predict({"measurements": inputs[i]["measurements"]})
        assert scores[i]["id"] == inputs[i]["id"]
        # one matrix product per batch: the same value up to floating-point rounding
        assert scores[i]["probability_malignant"] == pytest.approx(
            expected["probability_malignant"], rel=1e-9, abs=1e-15
        )
        assert scores[i]["label"] == expected["label"]
