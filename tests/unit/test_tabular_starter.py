"""``servinglib init --runtime``: each tabular starter trains, validates and self-tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servinglib.checks import run_selftest_suite, validate_service
from servinglib.config.spec import load_config
from servinglib.errors import ServinglibError
from servinglib.runtimes.tabular.starter import TABULAR_STARTERS, write_tabular_starter
from tests.conftest import run_cli


@pytest.mark.parametrize("runtime", sorted(TABULAR_STARTERS))
def test_init_runtime_writes_a_model_that_validates_and_self_tests(
    tmp_path: Path, runtime: str
) -> None:
    written = write_tabular_starter(tmp_path, runtime)
    assert all(path.is_file() for path in written)
    config, problems = validate_service(tmp_path / "servinglib.yaml")
    assert problems == []
    assert config is not None
    assert config.models[0].runtime == runtime
    assert config.models[0].batching is not None  # tabular runtimes batch by default
    run = run_selftest_suite(load_config(tmp_path / "servinglib.yaml"))
    assert run.passed, [(r.state, r.reason) for r in run.records]
    request = json.loads((tmp_path / "request.json").read_text())
    assert request["model_id"] == TABULAR_STARTERS[runtime][0]


def test_init_runtime_never_overwrites_without_force(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("# mine\n")
    with pytest.raises(ServinglibError, match="--force"):
        write_tabular_starter(tmp_path, "xgboost")
    assert (tmp_path / "train.py").read_text() == "# mine\n"


def test_the_cli_offers_the_runtimes(tmp_path: Path) -> None:
    result = run_cli("init", "--runtime", "catboost", str(tmp_path))
    assert result.returncode == 2
    assert "sklearn" in result.stderr
    assert "xgboost" in result.stderr
    assert "lightgbm" in result.stderr
