"""The release's own files: the workflow, the server image recipe and the changelog."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(
            f"{name} is not installed; it comes with the dev extra (./bin/test installs it)"
        )
    return found


def test_the_release_workflow_is_a_valid_github_workflow() -> None:
    workflow = ROOT / ".github" / "workflows" / "release.yml"
    result = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(workflow)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = workflow.read_text()
    assert "id-token: write" in text  # trusted publishing, no stored token
    for python in ("3.11", "3.12", "3.13"):
        assert f'"{python}"' in text


def test_the_server_image_recipe_passes_hadolint() -> None:
    result = subprocess.run(
        [_tool("hadolint"), "--failure-threshold", "warning", str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = (ROOT / "Dockerfile").read_text()
    assert "USER 10001:10001" in text
    assert "HEALTHCHECK" in text
    assert "download.pytorch.org/whl/cpu" in text


def test_each_changelog_version_has_a_section_the_release_notes_can_read() -> None:
    spec = importlib.util.spec_from_file_location(
        "changelog_section", ROOT / "release" / "changelog_section.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "<!-- towncrier release notes start -->" in text
    notes = module.section("0.2.0", text)
    assert notes.startswith("The first versioned release")
    assert "## [" not in notes
    with pytest.raises(KeyError):
        module.section("9.9.9", text)


def test_towncrier_renders_the_pending_fragments(tmp_path: Path) -> None:
    result = subprocess.run(
        [_tool("towncrier"), "build", "--draft", "--version", "9.9.9"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "9.9.9" in result.stdout
