"""Render a self-test run: a text report for people, JUnit XML for CI."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from servinglib.checks.selftests import SelftestRun
from servinglib.lifecycle.registry import VersionRecord, VersionState

__all__ = ["format_report", "format_table", "write_junit"]


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


def format_report(run: SelftestRun) -> str:
    """The table, one line per serving check, then the verdict (always last)."""
    parts = [format_table(run.records)]
    if run.serving:
        parts.append("\n".join(check.line() for check in run.serving))
    parts.append(run.summary())
    return "\n".join(parts)


def write_junit(run: SelftestRun, path: Path) -> None:
    """Write JUnit XML: one suite per model, one test per self-test case, load step or check.

    Every failure the console reports is a ``<failure>`` or ``<error>`` here, so CI agrees
    with the exit code.
    """
    suites = ET.Element("testsuites", name="servinglib selftest")
    by_model: dict[str, list[VersionRecord]] = {}
    for record in run.records:
        by_model.setdefault(record.model, []).append(record)
    total = failures = errors = 0
    for model, model_records in by_model.items():
        suite = ET.SubElement(suites, "testsuite", name=model)
        for record in model_records:
            _add_version(suite, record, run)
        s_tests = len(suite.findall("testcase"))
        s_failures = len(suite.findall("testcase/failure"))
        s_errors = len(suite.findall("testcase/error"))
        suite.set("tests", str(s_tests))
        suite.set("failures", str(s_failures))
        suite.set("errors", str(s_errors))
        total, failures, errors = total + s_tests, failures + s_failures, errors + s_errors
    suites.set("tests", str(total))
    suites.set("failures", str(failures))
    suites.set("errors", str(errors))
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def _add_version(suite: ET.Element, record: VersionRecord, run: SelftestRun) -> None:
    classname = f"{record.model}.v{record.version}"
    if not record.report.cases:
        case = ET.SubElement(
            suite, "testcase", classname=classname, name="load", time=f"{record.load_s:.6f}"
        )
        if record.state is VersionState.FAILED:
            ET.SubElement(case, "error", message=record.reason).text = record.reason
    for result in record.report.cases:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=classname,
            name=result.name,
            time=f"{result.duration_s:.6f}",
        )
        if not result.passed:
            body = "\n".join(result.problems)
            if result.traceback:
                body += "\n\n" + result.traceback
            ET.SubElement(case, "failure", message=result.problems[0]).text = body
    if record.state is VersionState.FAILED and record.report.passed:
        case = ET.SubElement(suite, "testcase", classname=classname, name="warmup")
        ET.SubElement(case, "error", message=record.reason).text = record.reason
    for check in run.serving:
        if (check.model, check.version) != (record.model, record.version):
            continue
        case = ET.SubElement(suite, "testcase", classname=classname, name=check.name)
        if not check.passed:
            ET.SubElement(case, "failure", message=check.message).text = check.message
