"""``servinglib validate`` finds what the server would refuse, all of it in one run."""

from __future__ import annotations

import pickle
from pathlib import Path

from benchmarks.composition_service import composition_service
from tests.conftest import run_cli


def test_a_pickle_artifact_the_loader_refuses_fails_validate(tmp_path: Path) -> None:
    assert run_cli("init", cwd=tmp_path).returncode == 0
    (tmp_path / "models/eta/1/model.joblib").write_bytes(pickle.dumps({"weights": [1.0]}))
    refused = run_cli("validate", cwd=tmp_path)
    assert refused.returncode == 1
    assert (
        "servinglib.yaml: models[0] (eta): version '1': model.joblib is pickle data, which runs "
        "code when loaded, so the server refuses to load it" in refused.stderr
    )
    config = tmp_path / "servinglib.yaml"
    config.write_text(config.read_text() + "    allow_pickle: true\n")
    allowed = run_cli("validate", cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr


def test_every_broken_composed_version_is_reported_in_one_run(tmp_path: Path) -> None:
    config = composition_service(tmp_path)
    text = config.read_text()
    # the first pipeline version (shared by two models through a YAML anchor) and an ensemble
    text = text.replace("inputs: {x: scale.x}", "inputs: {x: scael.x}", 1)
    text = text.replace('{model: const, version: "9"}', '{model: konst, version: "9"}', 1)
    config.write_text(text)
    refused = run_cli("validate", "--config", str(config))
    assert refused.returncode == 2
    lines = refused.stderr.splitlines()
    assert len(lines) == 3, refused.stderr
    assert all(line.startswith("error: ") for line in lines)
    assert "models[5].pipeline.1.steps[1].inputs.x" in lines[0]
    assert "models[6].pipeline.1.steps[1].inputs.x" in lines[1]
    assert "model 'konst', which is not configured" in lines[2]
