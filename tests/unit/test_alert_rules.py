"""The shipped alerting rules: valid for promtool, unit-tested with promtool, copied unchanged."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "servinglib/monitoring/alerts/servinglib-rules.yml"
OPERATOR = ROOT / "servinglib/monitoring/alerts/prometheus-rule.yaml"
TEMPLATE = ROOT / "templates/service/{{cookiecutter.service}}/monitoring"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not installed (Debian: apt-get install prometheus; .ci/run installs it)",
)


@needs_promtool
def test_promtool_check_rules_accepts_the_shipped_rules() -> None:
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 9 rules found" in result.stdout


@needs_promtool
def test_promtool_unit_tests_fire_each_alert_on_its_series(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    shutil.copy(RULES, tmp_path / "servinglib-rules.yml")
    shutil.copy(ROOT / "tests/fixtures/alerts/rules_test.yml", tmp_path / "rules_test.yml")
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "rules_test.yml"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def _operator_groups(path: Path) -> object:
    text = path.read_text().replace("{{ cookiecutter.service }}", "svc")
    document = yaml.safe_load(text.replace("{{ cookiecutter.team }}", "team"))
    assert (document["apiVersion"], document["kind"]) == (
        "monitoring.coreos.com/v1",
        "PrometheusRule",
    )
    return document["spec"]["groups"]


def test_prometheus_rule_manifests_and_template_copies_match_the_rules_file() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    assert _operator_groups(OPERATOR) == groups
    assert _operator_groups(TEMPLATE / "prometheus-rule.yaml") == groups
    assert (TEMPLATE / "servinglib-rules.yml").read_text() == RULES.read_text()
