"""servinglib.lifecycle.selftest: comparison rules and test_data.json parsing."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servinglib.errors import SelfTestDataError
from servinglib.lifecycle.selftest import compare_outputs, load_test_data, run_selftests
from servinglib.model import Model, SelfTestCase, Tolerance

TOL = Tolerance(atol=0.01, rtol=0.0)


@pytest.mark.parametrize(
    ("expected", "actual"),
    [
        (1.0, 1.005),
        ({"a": [1.0, 2.0]}, {"a": [1.001, 1.999]}),
        ("text", "text"),
        (3, 3),
        (True, True),
        (None, None),
        ([{"x": 1}], [{"x": 1}]),
        (float("nan"), math.nan),
        (math.inf, float("inf")),
        ((1.0, 2.0), [1.0, 2.0]),
        (np.array([0.5]), [0.5]),
        ([0.5, 0.25], np.array([0.5, 0.25], dtype=np.float32)),
        ({"n": 2}, {"n": np.int64(2)}),
    ],
)
def test_matching_outputs(expected: Any, actual: Any) -> None:
    assert compare_outputs(expected, actual, TOL) == []


@pytest.mark.parametrize(
    ("expected", "actual", "problem"),
    [
        (1.0, 1.02, "$: expected 1.0, got 1.02"),
        (3, 4, "$: expected 3, got 4"),
        (3, 3.0, "$: expected 3, got 3.0"),  # ints compare exactly, type included
        (True, 1, "$: expected True, got 1"),
        ("a", "b", "$: expected 'a', got 'b'"),
        ({"a": 1}, {"b": 1}, "$: missing key 'a'"),
        ([1, 2], [1], "$: expected 2 items, got 1"),
        ({"a": {"b": [1.0, 2.0]}}, {"a": {"b": [1.0, 2.5]}}, "$.a.b[1]: expected 2.0, got 2.5"),
        (1.0, "1.0", "$: expected 1.0, got '1.0'"),
    ],
)
def test_mismatches_name_the_path(expected: Any, actual: Any, problem: str) -> None:
    problems = compare_outputs(expected, actual, TOL)
    assert problems
    assert problems[0].startswith(problem)


def test_an_integer_expectation_against_a_float_says_why() -> None:
    (problem,) = compare_outputs({"eta_s": 312}, {"eta_s": 312.0}, TOL)
    assert problem.startswith("$.eta_s: expected 312, got 312.0 (")
    assert "write 312.0" in problem


def test_relative_tolerance() -> None:
    tol = Tolerance(atol=0.0, rtol=0.01)
    assert compare_outputs(1000.0, 1009.0, tol) == []
    assert compare_outputs(1000.0, 1011.0, tol) != []


def test_load_test_data_reads_cases_and_defaults(tmp_path: Path) -> None:
    (tmp_path / "test_data.json").write_text(
        json.dumps(
            {
                "cases": [
                    {"input": {"x": 1}, "expected": {"y": 2.0}, "tolerance": {"atol": 0.5}},
                    {"name": "named", "input": [1], "expected": [1]},
                ]
            }
        )
    )
    first, second = load_test_data(tmp_path)
    assert first.name == "case-0"
    assert first.tolerance == Tolerance(atol=0.5, rtol=1e-5)
    assert second.name == "named"


def test_no_file_means_no_cases(tmp_path: Path) -> None:
    assert load_test_data(tmp_path) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"cases": [{"input": 1}]}', "'expected' is a required property"),
        (
            '{"cases": [{"input": 1, "expect": 1}]}',
            r"unknown key 'expect' \(did you mean 'expected'\?\)",
        ),
        ('{"cases": [{"input": 1, "expected": 1, "tolerance": {"atol": -1}}]}', "minimum"),
    ],
)
def test_malformed_test_data_names_the_file(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "test_data.json").write_text(content)
    with pytest.raises(SelfTestDataError, match=message) as info:
        load_test_data(tmp_path)
    assert "test_data.json" in str(info.value)


class _Doubler(Model):
    def load(self, path: Path) -> None:
        pass

    def predict(self, features: Any) -> Any:
        if features == "boom":
            raise RuntimeError("kaput")
        return {"y": 2 * features}


def test_run_selftests_reports_each_case() -> None:
    cases = [
        SelfTestCase("ok", 2, {"y": 4}),
        SelfTestCase("wrong", 2, {"y": 5}),
        SelfTestCase("raises", "boom", {"y": 0}),
    ]
    report = run_selftests(_Doubler(), cases)
    assert [c.passed for c in report.cases] == [True, False, False]
    assert not report.passed
    assert "predict raised RuntimeError: kaput" in report.cases[2].problems[0]
    # The user's frame, file:line and source, in the one-line problem; all of it on the side.
    assert "test_selftest.py:" in report.cases[2].problems[0]
    assert 'raise RuntimeError("kaput")' in report.cases[2].problems[0]
    assert report.cases[2].traceback.startswith("Traceback (most recent call last)")
    assert "RuntimeError: kaput" in report.tracebacks()
    assert "self-test 'wrong' failed: $.y: expected 5, got 4" in report.failure_summary()
