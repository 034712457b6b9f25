"""Render self-test results: a text table for people, JUnit XML for CI."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from servinglib.registry import VersionRecord, VersionState

__all__ = ["format_table", "write_junit"]


def format_table(records: Sequence[VersionRecord]) -> str:
    """A fixed-width table: model, version, state, cases passed, time, reason."""
    rows = [("MODEL", "VERSION", "STATE", "CASES", "SECONDS", "REASON")]
    for r in records:
        passed = sum(c.passed for c in r.report.cases)
        rows.append(
            (
                r.model,
                r.version,
                r.state.value,
                f"{passed}/{len(r.report.cases)}",
                f"{r.load_s + r.selftest_s:.3f}",
                r.reason,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:5], widths, strict=True)) + "  " + row[5]
        for row in rows
    ]
    return "\n".join(line.rstrip() for line in lines)


def write_junit(records: Sequence[VersionRecord], path: Path) -> None:
    """Write JUnit XML: one suite per model, one test per self-test case (or load step)."""
    suites = ET.Element("testsuites", name="servinglib selftest")
    by_model: dict[str, list[VersionRecord]] = {}
    for record in records:
        by_model.setdefault(record.model, []).append(record)
    total = failures = errors = 0
    for model, model_records in by_model.items():
        suite = ET.SubElement(suites, "testsuite", name=model)
        s_tests = s_failures = s_errors = 0
        for record in model_records:
            classname = f"{model}.v{record.version}"
            if not record.report.cases:
                case = ET.SubElement(
                    suite, "testcase", classname=classname, name="load", time=f"{record.load_s:.6f}"
                )
                s_tests += 1
                if record.state is VersionState.FAILED:
                    ET.SubElement(case, "error", message=record.reason).text = record.reason
                    s_errors += 1
                continue
            for result in record.report.cases:
                case = ET.SubElement(
                    suite,
                    "testcase",
                    classname=classname,
                    name=result.name,
                    time=f"{result.duration_s:.6f}",
                )
                s_tests += 1
                if not result.passed:
                    ET.SubElement(case, "failure", message=result.problems[0]).text = "\n".join(
                        result.problems
                    )
                    s_failures += 1
            if record.state is VersionState.FAILED and record.report.passed:
                case = ET.SubElement(suite, "testcase", classname=classname, name="warmup")
                ET.SubElement(case, "error", message=record.reason).text = record.reason
                s_tests += 1
                s_errors += 1
        suite.set("tests", str(s_tests))
        suite.set("failures", str(s_failures))
        suite.set("errors", str(s_errors))
        total, failures, errors = total + s_tests, failures + s_failures, errors + s_errors
    suites.set("tests", str(total))
    suites.set("failures", str(failures))
    suites.set("errors", str(errors))
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)
