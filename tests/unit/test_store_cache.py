"""The local cache of a URL repository, through fsspec's file:// protocol (no server)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from servinglib.config.spec import load_config
from servinglib.errors import ConfigError
from servinglib.lifecycle.registry import ModelRegistry, VersionState
from servinglib.lifecycle.store import StoreError, cached_versions, sync_service

pytest.importorskip("fsspec")

SCORER = Path(__file__).parent.parent / "fixtures" / "service" / "models" / "scorer"


def service(tmp_path: Path, repository: str) -> Path:
    (tmp_path / "code").mkdir(exist_ok=True)
    shutil.copy(SCORER / "model.py", tmp_path / "code" / "model.py")
    config = tmp_path / "servinglib.yaml"
    config.write_text(
        "service: cache-test\nmodel_cache: {dir: cache}\nmodels:\n"
        f"  - {{name: scorer, class: code/model.py:ScorerModel, repository: '{repository}',"
        ' default_version: "2"}\n'
    )
    return config


def test_file_url_versions_are_copied_checked_and_evicted(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for version in ("1", "2"):
        shutil.copytree(SCORER / version, store / version)
    config = load_config(service(tmp_path, f"file://{store}"))
    model = config.models[0]
    assert model.repository_url == f"file://{store}"
    assert model.repository.is_relative_to(tmp_path / "cache")
    stale = model.repository / ".partial-2-deadbeef"  # what a killed download leaves
    stale.mkdir(parents=True)
    assert sync_service(config) == {}
    assert cached_versions(model) == ["1", "2"]
    assert not stale.exists()
    registry = ModelRegistry(config)
    registry.load_all()
    assert registry.record("scorer", "2").state is VersionState.READY
    shutil.rmtree(store / "1")
    (store / "2" / "weights.json").write_text(json.dumps({"weight": 9.0}))
    assert sync_service(config) == {}
    assert cached_versions(model) == ["2"]  # gone from the store: evicted at start
    # a cached version is never replaced in place: versions are immutable
    assert json.loads((model.repository / "2" / "weights.json").read_text()) == {"weight": 3.0}


def test_unreachable_store_keeps_the_cache_and_reports_it(tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(SCORER / "2", store / "2")
    config = load_config(service(tmp_path, f"file://{store}"))
    assert sync_service(config) == {}
    shutil.rmtree(store)
    errors = sync_service(config)
    assert "cannot list" in errors["scorer"]
    assert cached_versions(config.models[0]) == ["2"]


def test_cache_over_its_bound_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(SCORER / "2", store / "2")
    path = service(tmp_path, f"file://{store}")
    path.write_text(path.read_text().replace("{dir: cache}", "{dir: cache, max_bytes: 10}"))
    with pytest.raises(StoreError, match=r"over model_cache\.max_bytes=10"):
        sync_service(load_config(path))


def test_unknown_protocol_names_the_key_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"models\[0\]\.repository.*nosuch"):
        load_config(service(tmp_path, "nosuch://bucket/scorer"))
