"""Self-tests: cases packaged with each model version, run after every load and in CI.

A case is ``{"name", "input", "expected", "tolerance": {"atol", "rtol"}}`` in the version's
``test_data.json``, or a :class:`~servinglib.model.SelfTestCase` from
``Model.self_test_cases()``. Numbers are compared within tolerance; strings, integers,
booleans and ``null`` exactly; dicts and lists element-wise, so a mismatch is reported with
the path to the offending element::

    >>> compare_outputs({"p": [0.5, 1.0]}, {"p": [0.5, 0.9]}, Tolerance())
    ['$.p[1]: expected 1.0, got 0.9 (|diff| 0.1 > tolerance 1.001e-05)']
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from servinglib.config.schema_errors import explain_schema_error
from servinglib.errors import SelfTestDataError
from servinglib.lifecycle.tracebacks import format_exception, user_frame
from servinglib.model import Model, SelfTestCase, Tolerance
from servinglib.wire.jsonbytes import to_plain

__all__ = [
    "TEST_DATA_FILE",
    "CaseResult",
    "SelfTestReport",
    "compare_outputs",
    "load_test_data",
    "run_selftests",
    "to_plain",
]

TEST_DATA_FILE = "test_data.json"


@dataclass(frozen=True)
class CaseResult:
    """Outcome of one case; ``problems`` is empty when it passed."""

    name: str
    duration_s: float
    problems: tuple[str, ...] = ()
    traceback: str = ""  # the full traceback when predict raised

    @property
    def passed(self) -> bool:
        """True when the output matched."""
        return not self.problems


@dataclass(frozen=True)
class SelfTestReport:
    """Every case result of one model version."""

    cases: tuple[CaseResult, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        """True when every case passed (and there was at least one)."""
        return bool(self.cases) and all(case.passed for case in self.cases)

    def failure_summary(self) -> str:
        """One line naming each failed case and its first problem."""
        failed = [c for c in self.cases if not c.passed]
        return "; ".join(f"self-test {c.name!r} failed: {c.problems[0]}" for c in failed)

    def tracebacks(self) -> str:
        """The full traceback of each case whose predict raised (empty when none did)."""
        return "\n".join(f"self-test {c.name!r}:\n{c.traceback}" for c in self.cases if c.traceback)


@cache
def _test_data_schema() -> dict[str, Any]:
    text = resources.files("servinglib.schema").joinpath("test_data.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def _unknown_keys_first(error: jsonschema.ValidationError) -> tuple[bool, list[Any]]:
    return (error.validator != "additionalProperties", list(error.absolute_path))


def load_test_data(version_dir: Path) -> list[SelfTestCase]:
    """Read ``test_data.json`` of a version directory; no file means no cases.

    Raises:
        SelfTestDataError: the file is not JSON or does not match the test-data schema.
    """
    path = version_dir / TEST_DATA_FILE
    if not path.is_file():
        return []
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise SelfTestDataError(f"not valid JSON: {e}; fix the file", source=str(path)) from e
    validator = jsonschema.Draft202012Validator(_test_data_schema())
    errors = sorted(validator.iter_errors(document), key=_unknown_keys_first)
    if errors:
        error = errors[0]  # a misspelt key also makes a required one missing: name the typo
        key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        raise SelfTestDataError(
            f"{explain_schema_error(error)}; see docs/reference/test-data.md for the format",
            source=str(path),
            key_path=key.lstrip("."),
        )
    cases = []
    for i, raw in enumerate(document["cases"]):
        tolerance = Tolerance(**raw.get("tolerance", {}))
        cases.append(
            SelfTestCase(
                name=raw.get("name", f"case-{i}"),
                input=raw["input"],
                expected=raw["expected"],
                tolerance=tolerance,
            )
        )
    return cases


def compare_outputs(expected: Any, actual: Any, tolerance: Tolerance, path: str = "$") -> list[str]:
    """List every difference between ``expected`` and ``actual`` (empty when they match)."""
    expected, actual = to_plain(expected), to_plain(actual)
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected an object, got {_short(actual)}"]
        problems = [f"{path}: missing key {k!r}" for k in expected if k not in actual]
        problems += [f"{path}: unexpected key {k!r}" for k in actual if k not in expected]
        for key in expected:
            if key in actual:
                problems += compare_outputs(expected[key], actual[key], tolerance, f"{path}.{key}")
        return problems
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return [f"{path}: expected a list, got {_short(actual)}"]
        if len(expected) != len(actual):
            return [f"{path}: expected {len(expected)} items, got {len(actual)}"]
        problems = []
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            problems += compare_outputs(e, a, tolerance, f"{path}[{i}]")
        return problems
    if isinstance(expected, float) and _is_number(actual):
        return _compare_float(expected, float(actual), tolerance, path)
    if type(expected) is not type(actual) or expected != actual:
        problem = f"{path}: expected {_short(expected)}, got {_short(actual)}"
        if _is_number(expected) and isinstance(actual, float):
            problem += (
                f" (an integer in `expected` matches only an integer; write {float(expected)!r}"
                " to compare numbers within the tolerance)"
            )
        return [problem]
    return []


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare_float(expected: float, actual: float, tol: Tolerance, path: str) -> list[str]:
    if expected == actual or (math.isnan(expected) and math.isnan(actual)):
        return []  # also covers matching infinities, whose difference is NaN
    allowed = tol.atol + tol.rtol * abs(expected)
    diff = abs(actual - expected)
    if diff <= allowed:
        return []
    return [
        f"{path}: expected {expected!r}, got {actual!r} "
        f"(|diff| {diff:.4g} > tolerance {allowed:.4g})"
    ]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def run_selftests(model: Model, cases: Sequence[SelfTestCase]) -> SelfTestReport:
    """Run each case through ``model.predict``; an exception fails that case only."""
    results = []
    for case in cases:
        started = time.perf_counter()
        trace = ""
        try:
            actual = model.predict(model.prepare(case.input))
        except Exception as e:  # a raising model is a failed case, reported, not a crash
            where = user_frame(e)
            problems: tuple[str, ...] = (
                f"predict raised {type(e).__name__}: {e}" + (f" at {where}" if where else ""),
            )
            trace = format_exception(e)
        else:
            problems = tuple(compare_outputs(case.expected, actual, case.tolerance))
        results.append(CaseResult(case.name, time.perf_counter() - started, problems, trace))
    return SelfTestReport(tuple(results))
