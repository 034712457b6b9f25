"""Checks without a server: ``servinglib validate``, ``servinglib selftest`` and its reports.

- :func:`validate_service`: the config and everything it references, loading no model;
- :func:`run_selftest_suite`: load and self-test every version as a worker would, then
  check batch invariance and ``optimize_budgets`` of those that loaded;
- :func:`format_report` and :func:`write_junit`: the console report and JUnit XML.
"""

from __future__ import annotations

from servinglib.checks.report import format_report, format_table, write_junit
from servinglib.checks.selftests import SelftestRun, run_all_selftests, run_selftest_suite
from servinglib.checks.serving import ServingCheck, run_serving_checks
from servinglib.checks.validate import validate_service

__all__ = [
    "SelftestRun",
    "ServingCheck",
    "format_report",
    "format_table",
    "run_all_selftests",
    "run_selftest_suite",
    "run_serving_checks",
    "validate_service",
    "write_junit",
]
