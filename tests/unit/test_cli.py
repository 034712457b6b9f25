"""The ``servinglib`` command, run as a real process: exit codes, table, JUnit XML."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import run_cli as run


@pytest.fixture
def passing_config(tmp_path: Path, service_config: Path) -> Path:
    """The fixture service restricted to its good versions."""
    copy = tmp_path / "service"
    shutil.copytree(service_config.parent, copy)
    config = copy / "servinglib.yaml"
    config.write_text(
        config.read_text().replace(
            'default_version: "2"', 'default_version: "2"\n    versions: ["1", "2"]', 1
        )
    )
    return config


def test_selftest_fails_with_exit_1_and_a_table(service_config: Path, tmp_path: Path) -> None:
    junit = tmp_path / "report.xml"
    result = run("selftest", "--config", str(service_config), "--junit", str(junit))
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["MODEL", "VERSION", "STATE", "CASES", "SECONDS", "REASON"]
    row = next(line for line in lines if line.startswith("scorer  4"))
    assert "FAILED  1/2" in row
    assert "self-test 'wrong expectation' failed" in row
    assert "4 of 6 version(s) passed" in result.stdout
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"scorer", "echo", "whoami"}
    scorer = suites["scorer"]
    cases = scorer.findall("testcase")
    assert int(scorer.get("tests", "-1")) == len(cases) == 7
    assert (
        int(scorer.get("failures", "-1"))
        == len([c for c in cases if c.find("failure") is not None])
        == 1
    )
    assert (
        int(scorer.get("errors", "-1"))
        == len([c for c in cases if c.find("error") is not None])
        == 1
    )
    assert int(root.get("tests", "-1")) == sum(int(s.get("tests", "0")) for s in suites.values())
    failure = next(c for c in cases if c.find("failure") is not None)
    assert (failure.get("classname"), failure.get("name")) == ("scorer.v4", "wrong expectation")
    for case in cases:
        float(case.get("time", "x"))


def test_selftest_passes_with_exit_0(passing_config: Path, tmp_path: Path) -> None:
    junit = tmp_path / "ok.xml"
    result = run("selftest", "--config", str(passing_config), "--junit", str(junit))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 of 4 version(s) passed" in result.stdout
    root = ET.parse(junit).getroot()
    assert root.get("failures") == "0"
    assert root.get("errors") == "0"


def test_selftest_reads_servinglib_yaml_from_the_working_directory(passing_config: Path) -> None:
    assert run("selftest", cwd=passing_config.parent).returncode == 0


def test_validate_ok_and_problems(passing_config: Path, tmp_path: Path) -> None:
    ok = run("validate", "--config", str(passing_config))
    assert ok.returncode == 0, ok.stderr
    assert "OK (3 model(s): scorer, echo, whoami)" in ok.stdout
    text = passing_config.read_text()
    passing_config.write_text(
        text.replace("models/scorer/model.py:ScorerModel", "models/scorer/model.py:Nope")
    )
    (passing_config.parent / "models" / "echo" / "1" / "test_data.json").write_text("{broken")
    bad = run("validate", "--config", str(passing_config))
    assert bad.returncode == 1
    assert (
        "models[0] (scorer).class: module 'models/scorer/model.py' has no attribute 'Nope'"
        in bad.stderr
    )
    assert "test_data.json: not valid JSON" in bad.stderr


def test_invalid_config_is_reported_not_raised(tmp_path: Path) -> None:
    config = tmp_path / "servinglib.yaml"
    config.write_text("service: s\nmodels: []\n")
    for command in ("validate", "selftest", "serve"):
        result = run(command, "--config", str(config))
        assert result.returncode in (1, 2), command
        assert "models: [] should be non-empty" in result.stderr, command
        assert "Traceback" not in result.stderr


def test_serve_flags_are_checked_by_the_schema(passing_config: Path) -> None:
    result = run("serve", "--config", str(passing_config), "--workers", "0")
    assert result.returncode == 2
    assert "server.workers" in result.stderr
    assert "is below the minimum 1" in result.stderr


def test_version_flag() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("servinglib ")


def test_selftest_enforces_optimize_budgets(passing_config: Path) -> None:
    text = passing_config.read_text()
    tight = text.replace(
        'versions: ["1", "2"]',
        'versions: ["1", "2"]\n    optimize_budgets: {max_size_mb: 0.000001}',
        1,
    )
    passing_config.write_text(tight)
    result = run("selftest", "--config", str(passing_config))
    assert result.returncode == 1
    assert "max_size_mb" in result.stdout
    assert "EXCEEDED" in result.stdout
    passing_config.write_text(
        text.replace(
            'versions: ["1", "2"]',
            'versions: ["1", "2"]\n    optimize_budgets: {max_size_mb: 10}',
            1,
        )
    )
    assert run("selftest", "--config", str(passing_config)).returncode == 0


@pytest.mark.parametrize(
    "command",
    [
        "init",
        "doctor",
        "serve",
        "validate",
        "selftest",
        "admin",
        "profile",
        "drift",
        "optimize",
        "batch-predict",
    ],
)
def test_every_command_help_has_a_description_exit_codes_and_the_docs(command: str) -> None:
    result = run(command, "--help")
    assert result.returncode == 0
    usage, description = result.stdout.split("\n\n", 2)[:2]
    assert usage.startswith(f"usage: servinglib {command}")
    assert len(description.split()) > 8, description  # a real description, not the usage again
    assert "\nexit codes: 0 " in result.stdout
    assert "SERVINGLIB_CONFIG" in result.stdout
    assert "docs: https://" in result.stdout
    if "  --config CONFIG" in result.stdout:
        assert "(default: $SERVINGLIB_CONFIG or servinglib.yaml)" in " ".join(result.stdout.split())
