"""The optimize report validates against its published JSON Schema, and so do the examples'."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

sys.path.insert(0, str(Path(__file__).parent))
from optimize_models import regressor_rows, write_regressor

from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.measure import MeasureSettings
from servinglib.optimize.pipeline import OptimizeSettings, optimize_model
from servinglib.optimize.report import REPORT_FIELDS, report_schema, validate_report

REPOSITORY = Path(__file__).resolve().parents[2]
EXAMPLE_REPORTS = sorted(REPOSITORY.glob("examples/*/report*/**/optimize-report.json"))


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("schema")
    write_regressor(tmp / "eta.onnx")
    np.savez(tmp / "valid.npz", x=regressor_rows(40, 1))
    outcome = optimize_model(
        tmp / "eta.onnx",
        tmp / "int8" / "eta.onnx",
        validation=tmp / "valid.npz",
        settings=OptimizeSettings(
            progress=False,
            measure=MeasureSettings(warmup=1, iterations=5, repeats=5, batch_size=4),
        ),
    )
    loaded: dict[str, object] = json.loads(outcome.files.json.read_text())
    return loaded


def test_the_schema_lists_every_report_field() -> None:
    schema = report_schema()
    assert tuple(schema["properties"]) == REPORT_FIELDS
    assert schema["required"] == list(REPORT_FIELDS)


def test_a_written_report_validates_and_states_rounds_spread_and_machine(
    document: dict[str, object],
) -> None:
    validate_report(document)  # write_report validated it too; this checks the file on disk
    baseline = document["baseline"]
    assert isinstance(baseline, dict)
    assert baseline["latency_ms"]["rounds"] == 5
    assert len(baseline["latency_ms"]["rounds_p50_ms"]) == 5
    assert baseline["latency_ms"]["round_spread"] >= 0
    machine = document["machine"]
    assert isinstance(machine, dict)
    assert machine["logical_cores"] >= 1
    assert document["choice_reason"]


def test_a_report_that_breaks_the_schema_is_refused(document: dict[str, object]) -> None:
    broken = json.loads(json.dumps(document))
    broken["baseline"]["path"] = "/home/someone/model.onnx"
    with pytest.raises(OptimizeError, match="baseline/path"):
        validate_report(broken)
    del broken["accuracy"]["why"]
    with pytest.raises(OptimizeError, match="schema"):
        validate_report(broken)


@pytest.mark.parametrize("path", EXAMPLE_REPORTS, ids=lambda p: str(p.relative_to(REPOSITORY)))
def test_committed_example_reports_validate(path: Path) -> None:
    validate_report(json.loads(path.read_text()))
