"""``add-model runtime=sklearn|xgboost|lightgbm``: a generated repository gains a tabular
model whose starter artifact is fitted at generation time, whose self-tests pass, and whose
generated tests pass through the whole HTTP stack.

The repository's commands run with this interpreter (servinglib and the frameworks are
installed here); the fresh-virtualenv tests of ``test_generated_repos.py`` cover installing
a repository's requirements.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from servinglib_generator import ModelSpec, add_model

from tests.generator._repos import REPO_ROOT, assert_all_passed, render, run, tool

pytestmark = pytest.mark.integration

TABULAR = {  # runtime -> (artifact, requirement line)
    "sklearn": ("model.skops", "skops>=0.10"),
    "xgboost": ("model.json", "xgboost>=2.0"),
    "lightgbm": ("model.txt", "lightgbm>=4.0"),
}


def test_tabular_models_added_to_a_repository_self_test_and_pass_their_tests(
    tmp_path: Path,
) -> None:
    for package in ("sklearn", "skops", "xgboost", "lightgbm"):
        pytest.importorskip(package)
    repo = render(tmp_path, servinglib="servinglib>=0.1")
    for runtime, (artifact, requirement) in TABULAR.items():
        added = add_model(repo, ModelSpec(f"fare-{runtime}", runtime))  # type: ignore[arg-type]
        assert added.manual_steps == ()
        assert (repo / f"models/fare-{runtime}/1/{artifact}").is_file()
        assert not (repo / f"models/fare-{runtime}/model.py").exists()
        assert requirement in (repo / "requirements.txt").read_text()
    config = (repo / "servinglib.yaml").read_text()
    assert "runtime: xgboost  # serves models/fare-xgboost/<version>/model.json" in config

    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SERVINGLIB_")},
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "generator")]),
    }
    env.pop("PYTEST_ADDOPTS", None)
    # each generated file starts with test_every_version_passes_its_self_tests
    tests = [f"tests/test_model_fare_{runtime}.py" for runtime in TABULAR]
    result = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=repo, env=env
    )
    assert_all_passed(result.stdout, at_least=12)
    run([tool("ruff"), "check", "--no-cache", *tests], cwd=repo)
    run([tool("ruff"), "format", "--check", "--no-cache", *tests], cwd=repo)
