"""``servinglib init``: the README's one-file model, written byte for byte, passes its checks."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from servinglib.cli.starter import STARTER_FILES
from tests.conftest import run_cli as run

README = Path(__file__).parents[2] / "README.md"


def readme_blocks() -> list[str]:
    """The fenced code blocks of the README's "Your model in one file" section."""
    section = README.read_text().split("## Your model in one file", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```[a-z]*\n(.*?)```", section, re.DOTALL)


def test_the_readme_shows_every_file_init_writes() -> None:
    blocks = readme_blocks()
    for name, text in STARTER_FILES.items():
        assert text in blocks, f"{name} differs from the README"


def test_init_then_the_readme_commands_pass(tmp_path: Path) -> None:
    written = run("init", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    for name, text in STARTER_FILES.items():
        assert (tmp_path / name).read_text() == text
    assert "next: servinglib validate" in written.stdout
    validate = run("validate", cwd=tmp_path)
    assert validate.returncode == 0, validate.stderr
    assert validate.stdout == "servinglib.yaml: OK (1 model(s): eta)\n"
    selftest = run("selftest", "--junit", "selftest.xml", cwd=tmp_path)
    assert selftest.returncode == 0, selftest.stdout + selftest.stderr
    assert "eta    1        READY  1/1" in selftest.stdout
    assert "1 of 1 version(s) passed" in selftest.stdout
    assert (tmp_path / "selftest.xml").is_file()


def test_init_never_overwrites_without_force(tmp_path: Path) -> None:
    (tmp_path / "servinglib.yaml").write_text("mine\n")
    refused = run("init", cwd=tmp_path)
    assert refused.returncode == 2
    assert "would overwrite servinglib.yaml" in refused.stderr
    assert "--force" in refused.stderr
    assert (tmp_path / "servinglib.yaml").read_text() == "mine\n"
    assert not (tmp_path / "models").exists()
    assert run("init", "--force", cwd=tmp_path).returncode == 0
    assert (tmp_path / "servinglib.yaml").read_text() == STARTER_FILES["servinglib.yaml"]


def test_the_starter_schema_types_its_feature_so_a_string_is_a_400(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servinglib.serve.app import create_app_from_config

    # The starter's class is models.eta.model: a `models` package another test of this
    # process imported (or put on sys.path) from its own directory would be found first.
    for name in [n for n in sys.modules if n == "models" or n.startswith("models.")]:
        monkeypatch.delitem(sys.modules, name)
    # the starter's models/ has no __init__.py, and Python prefers any regular `models`
    # package on sys.path (a fixture's) to a namespace package, wherever it comes
    kept = [p for p in sys.path if not (Path(p) / "models" / "__init__.py").is_file()]
    monkeypatch.setattr(sys, "path", [str(tmp_path), *kept])
    assert run("init", cwd=tmp_path).returncode == 0
    client = create_app_from_config(tmp_path / "servinglib.yaml").test_client()
    answer = client.post("/infer", json={"model_id": "eta", "features": {"distance_km": "two"}})
    assert answer.status_code == 400
    assert answer.get_json()["error"] == "features.distance_km: 'two' is not of type 'number'"
    fine = client.post("/infer", json={"model_id": "eta", "features": {"distance_km": 2.0}})
    assert fine.get_json()["output"] == {"eta_s": 312.0}
