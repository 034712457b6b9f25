"""The command line: prompts, re-runs that refuse to overwrite, add-model that keeps edits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from servinglib_generator.cli import main
from servinglib_generator.prompts import SERVICE_PROMPTS

from servinglib.config.spec import load_config
from servinglib.testing import assert_selftests_pass
from tests.generator._repos import REPO_ROOT, needs_runtime, render, run, tool


def generate(output: Path, *answers: str) -> int:
    fixed = ["--no-input", "--output-dir", str(output), "team=eta", "model=eta"]
    return main([*fixed, f"servinglib={REPO_ROOT}", *answers])


def test_rerunning_refuses_to_overwrite_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generate(tmp_path) == 0
    repo = tmp_path / "eta-service"
    assert "generated " + str(repo) in capsys.readouterr().out
    (repo / "NOTES.md").write_text("ours\n")
    config = repo / "servinglib.yaml"
    config.write_text(config.read_text().replace("workers: 2", "workers: 3"))

    assert generate(tmp_path) == 1
    assert "already exists" in capsys.readouterr().err
    assert "workers: 3" in config.read_text()

    assert generate(tmp_path, "--overwrite") == 0
    assert (repo / "NOTES.md").read_text() == "ours\n"
    assert "workers: 2" in config.read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_interactive_prompts_over_stdin(tmp_path: Path) -> None:
    # team is refused once and asked again; servinglib is this checkout; every other
    # question takes its default.
    answers = ["Eta Team", *("" for _ in SERVICE_PROMPTS)]
    keys = [prompt.key for prompt in SERVICE_PROMPTS]
    answers[1 + keys.index("team")] = "eta"
    answers[1 + keys.index("model")] = "eta"
    answers[1 + keys.index("servinglib")] = str(REPO_ROOT)
    result = run(
        [sys.executable, "-m", "servinglib_generator.cli", "--output-dir", tmp_path],
        stdin="\n".join(answers) + "\n",
    )
    assert "'Eta Team' is not a DNS-safe name" in result.stderr
    assert "team: Team that owns the service" in result.stdout
    assert "service: Name of the service (Deployment, Service and image name) [eta-service]" in (
        result.stdout
    )
    assert load_config(tmp_path / "eta-service" / "servinglib.yaml").team == "eta"


def test_end_of_input_is_an_error_not_a_hang(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "servinglib_generator.cli", "--output-dir", str(tmp_path)],
        input="eta\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "no answer for 'model' (end of input)" in result.stderr
    assert list(tmp_path.iterdir()) == []


HAND_EDITED = """\
# Tuned by the eta team: keep this comment.
"""


def test_add_model_keeps_hand_edits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    needs_runtime("onnx")
    repo = render(tmp_path)
    config = repo / "servinglib.yaml"
    text = config.read_text().replace("  workers: 2\n", "  workers: 4  # measured\n")
    text = text.replace('    default_version: "1"', '    default_version: "1"\n    versions: ["1"]')
    config.write_text(HAND_EDITED + text)

    assert (
        main(["add-model", "--repo", str(repo), "--no-input", "model=fraud", "runtime=onnx"]) == 0
    )
    out = capsys.readouterr().out
    assert "created models/fraud/1/model.onnx" in out
    assert "updated .github/workflows/ci.yml" in out

    new_text = config.read_text()
    assert new_text.startswith(HAND_EDITED + text)  # everything before, byte for byte
    loaded = load_config(config, environ={})
    assert loaded.server.workers == 4
    assert [(m.name, m.versions) for m in loaded.models] == [("eta", ("1",)), ("fraud", None)]
    assert_selftests_pass(config, model="fraud")

    workflow = repo / ".github/workflows/ci.yml"
    matrix = yaml.safe_load(workflow.read_text())["jobs"]["models"]["strategy"]["matrix"]
    assert matrix["model"] == ["eta", "fraud"]
    run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", workflow])
    assert json.loads((repo / "terraform/models.auto.tfvars.json").read_text()) == {
        "models": ["eta", "fraud"]
    }
    deployment = repo / "k8s/deployment.yaml"
    annotations = yaml.safe_load(deployment.read_text())["metadata"]["annotations"]
    assert annotations["servinglib.dev/models"] == "eta,fraud"
    run([tool("kubernetes-validate"), "--strict", deployment])
    assert "onnxruntime>=1.17" in (repo / "requirements.txt").read_text().splitlines()
    assert (repo / "tests/test_model_fraud.py").is_file()
    run([tool("ruff"), "check", "--no-cache", "."], cwd=repo)
    run([tool("ruff"), "format", "--check", "--no-cache", "."], cwd=repo)


def test_add_model_reports_what_it_cannot_edit_safely(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = render(tmp_path)
    workflow = repo / ".github/workflows/ci.yml"
    restructured = workflow.read_text().replace("model: [eta]", "model:\n          - eta")
    workflow.write_text(restructured)

    assert main(["add-model", "--repo", str(repo), "--no-input", "model=fraud-v2"]) == 0
    err = capsys.readouterr().err
    assert "to do by hand: .github/workflows/ci.yml: add fraud_v2 to jobs.models" in err
    assert workflow.read_text() == restructured
    assert (repo / "models/fraud-v2/model.py").read_text().count("class FraudV2Model(") == 1

    assert main(["add-model", "--repo", str(repo), "--no-input", "model=fraud-v2"]) == 1
    assert "already has a model 'fraud-v2'" in capsys.readouterr().err


def test_add_model_needs_a_generated_repository(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["add-model", "--repo", str(tmp_path), "--no-input", "model=fraud"]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path} has no servinglib.yaml: run add-model inside a repository" in err
    assert "pass --repo PATH" in err
    assert "--config" not in err
    assert list(tmp_path.iterdir()) == []


def test_without_cookiecutter_the_command_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "cookiecutter", None)  # import fails as if not installed
    assert main(["add-model", "--repo", str(tmp_path), "--no-input", "model=fraud"]) == 1
    err = capsys.readouterr().err
    assert "needs cookiecutter" in err
    assert "pip install 'servinglib[generator]'" in err
    assert "Traceback" not in err


def test_version_and_add_model_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as version:
        main(["--version"])
    assert version.value.code == 0
    assert capsys.readouterr().out.startswith("servinglib-generate ")
    with pytest.raises(SystemExit):
        main(["add-model", "--help"])
    help_text = capsys.readouterr().out
    assert "e.g. model=fraud runtime=torch" in help_text
    assert "team=eta" not in help_text


@pytest.mark.parametrize(
    ("runtime", "package", "fix"),
    [
        ("onnx", "onnx", "pip install 'servinglib[onnx]'"),
        ("torch", "torch", "pip install torch==2.13.0"),
    ],
)
def test_a_missing_artifact_builder_is_a_clear_error_that_writes_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    runtime: str,
    package: str,
    fix: str,
) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # import fails as if not installed
    assert generate(tmp_path, f"runtime={runtime}") == 1
    err = capsys.readouterr().err
    assert f"runtime={runtime} builds a starter" in err
    assert fix in err
    assert list(tmp_path.iterdir()) == []


def test_servinglib_spec_pins_the_version_and_conflicting_answers_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixed = ["--no-input", "--output-dir", str(tmp_path), "team=eta", "model=eta"]
    assert main([*fixed, "--servinglib-spec", "servinglib==0.2.1"]) == 0
    requirements = (tmp_path / "eta-service" / "requirements.txt").read_text().splitlines()
    assert "servinglib[tracing]==0.2.1" in requirements
    assert not list((tmp_path / "eta-service" / "wheels").glob("*.whl"))
    other = tmp_path / "other"
    args = ["--no-input", "--output-dir", str(other), "team=eta", "model=eta"]
    assert main([*args, "--servinglib-spec", "servinglib==0.2.1", "servinglib=servinglib"]) == 2
    assert "servinglib= and --servinglib-spec disagree" in capsys.readouterr().err
    assert not other.exists()
