"""servinglib.checks: validate, the self-test run with its serving checks, and the reports."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from servinglib.checks import run_selftest_suite, validate_service, write_junit
from servinglib.config.spec import load_config
from tests.conftest import run_cli as run


def service(root: Path, model_py: str, *, extra: str = "", test_data: str | None = None) -> Path:
    """A one-model service at ``root`` whose class is ``model.py:M``."""
    (root / "model.py").write_text(textwrap.dedent(model_py))
    (root / "repo" / "1").mkdir(parents=True)
    if test_data is not None:
        (root / "repo" / "1" / "test_data.json").write_text(test_data)
    config = root / "servinglib.yaml"
    config.write_text(
        "service: s\nmodels:\n  - name: m\n    class: model.py:M\n    repository: repo\n"
        '    default_version: "1"\n' + extra
    )
    return config


PLAIN = """
    import servinglib

    class M(servinglib.Model):
        def load(self, path):
            self.base = 1.0

        def predict(self, features):
            return {"y": features["x"] * 2.0 + self.base}
"""

CASES = (
    '{"cases": [{"input": {"x": 1.0}, "expected": {"y": 3.0}},'
    ' {"input": {"x": 2.0}, "expected": {"y": 5.0}},'
    ' {"input": {"x": 3.0}, "expected": {"y": 7.0}}]}'
)


def test_a_class_without_test_data_is_reported_unless_it_declares_cases(tmp_path: Path) -> None:
    config = service(tmp_path, PLAIN)
    _, problems = validate_service(config)
    assert len(problems) == 1
    assert "version '1' has no" in problems[0]
    assert "test_data.json" in problems[0]
    assert "self_test_cases()" in problems[0]
    declaring = PLAIN + (
        "\n        def self_test_cases(self):\n"
        '            return [servinglib.SelfTestCase("one", {"x": 1.0}, {"y": 3.0})]\n'
    )
    (tmp_path / "declaring.py").write_text(textwrap.dedent(declaring))  # a fresh module
    config.write_text(config.read_text().replace("model.py:M", "declaring.py:M"))
    assert validate_service(config)[1] == []


def test_a_case_the_input_schema_refuses_is_reported(tmp_path: Path) -> None:
    config = service(
        tmp_path,
        PLAIN,
        extra="    input_schema: {type: object, required: [x], properties: {x: {type: number}}}\n",
        test_data='{"cases": [{"name": "bad", "input": {"x": "2"}, "expected": {"y": 5.0}}]}',
    )
    _, problems = validate_service(config)
    assert len(problems) == 1
    assert "cases[0] ('bad').input.x: '2' is not of type 'number'" in problems[0]
    assert "the server refuses this input" in problems[0]


def test_validate_exit_codes_match_the_reference(tmp_path: Path) -> None:
    config = service(tmp_path, PLAIN)
    assert run("validate", cwd=tmp_path).returncode == 1  # a version without self-tests
    config.write_text("service: s\nmodels: []\n")
    assert run("validate", cwd=tmp_path).returncode == 2  # the config itself is invalid
    reference = (Path(__file__).parents[2] / "docs" / "reference" / "cli.md").read_text()
    assert "it exits with 2 when the config itself is invalid" in reference


NOT_INVARIANT = """
    import servinglib

    class M(servinglib.Model):
        def load(self, path):
            pass

        def predict(self, features):
            return {"y": features["x"] * 2.0 + 1.0}

        def predict_batch(self, batch):  # drifts with the batch size, within the tolerance
            return [{"y": f["x"] * 2.0 + 1.0 + 0.01 * (len(batch) - 1)} for f in batch]
"""


def test_batch_invariance_and_budget_failures_fail_the_run_and_the_junit(tmp_path: Path) -> None:
    tolerant = CASES.replace('"expected"', '"tolerance": {"atol": 0.05}, "expected"')
    service(
        tmp_path,
        NOT_INVARIANT,
        extra="    batching: {max_batch_size: 4}\n    optimize_budgets: {max_size_mb: 0.000001}\n",
        test_data=tolerant,
    )
    (tmp_path / "repo" / "1" / "weights.bin").write_bytes(b"\0" * 1000)
    result = run("selftest", "--junit", "selftest.xml", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "m      1        READY" in lines[1]  # loaded and self-tested fine
    assert any("NOT batch-invariant" in line for line in lines)
    assert any("max_size_mb" in line and "EXCEEDED" in line for line in lines)
    verdict = next(i for i, line in enumerate(lines) if "version(s) passed" in line)
    assert lines[verdict] == (
        "0 of 1 version(s) passed; failed: m 1 (batch invariance, max_size_mb)"
    )
    assert all("EXCEEDED" not in line for line in lines[verdict:])  # the verdict comes last
    root = ET.parse(tmp_path / "selftest.xml").getroot()
    assert root.get("failures") == "2"
    failed = {c.get("name") for c in root.iter("testcase") if c.find("failure") is not None}
    assert failed == {"batch invariance", "max_size_mb"}


def test_a_raising_predict_shows_the_users_line_and_the_junit_traceback(tmp_path: Path) -> None:
    raising = PLAIN.replace('features["x"] * 2.0', 'features["x"] * self.weights["base_s"]')
    config = service(tmp_path, raising, test_data=CASES)
    run_ = run_selftest_suite(load_config(config))
    (record,) = run_.records
    assert "predict raised AttributeError" in record.reason
    assert "model.py:9: return" in record.reason  # file:line and the source line
    write_junit(run_, tmp_path / "out.xml")
    failure = next(ET.parse(tmp_path / "out.xml").getroot().iter("failure"))
    assert "Traceback (most recent call last)" in (failure.text or "")
    assert 'model.py", line 9, in predict' in (failure.text or "")


def test_load_failures_point_at_the_users_line(tmp_path: Path) -> None:
    broken = PLAIN.replace("self.base = 1.0", 'self.base = {}["missing"]')
    config = service(tmp_path, broken, test_data=CASES)
    (record,) = run_selftest_suite(load_config(config)).records
    assert record.reason.startswith("load() raised KeyError: 'missing' at ")
    assert record.reason.endswith('model.py:6: self.base = {}["missing"]')


@pytest.mark.parametrize(
    ("reference", "hint"),
    [
        ("model.py.M", "did you mean 'model.py:M'?"),
        ("models.eta.model.EtaModel", "did you mean 'models.eta.model:EtaModel'?"),
    ],
)
def test_a_class_reference_without_colon_gets_the_form_and_a_guess(
    tmp_path: Path, reference: str, hint: str
) -> None:
    config = service(tmp_path, PLAIN, test_data=CASES)
    config.write_text(config.read_text().replace("model.py:M", reference))
    config_, problems = validate_service(config)
    assert config_ is None
    assert "use `path/file.py:Class` or `package.module:Class`" in problems[0]
    assert hint in problems[0]
    assert "lower-case letters" not in problems[0]
