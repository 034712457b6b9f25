"""servinglib.lifecycle.rollout: workers converge to the desired state; a rollback never waits on loads."""

from __future__ import annotations

import shutil
from pathlib import Path

from servinglib.config.spec import load_config
from servinglib.lifecycle.registry import ModelRegistry, VersionState
from servinglib.lifecycle.rollout import (
    DesiredState,
    RolloutWatcher,
    apply_desired_state,
    read_desired_state,
    read_worker_statuses,
    write_desired_state,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "service"


def registry(tmp_path: Path) -> ModelRegistry:
    shutil.copytree(FIXTURE / "models", tmp_path / "models")
    text = (
        (FIXTURE / "servinglib.yaml")
        .read_text()
        .replace('default_version: "2"', 'default_version: "2"\n    versions: ["2"]', 1)
    )
    (tmp_path / "servinglib.yaml").write_text(text)
    loaded = ModelRegistry(load_config(tmp_path / "servinglib.yaml", environ={}))
    loaded.load_all()
    return loaded


def test_load_promote_rollback_unload(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    state = DesiredState(1)
    plan = state.plan("scorer")
    plan.load, plan.load_revisions = ["1", "4"], {"1": 1, "4": 1}
    attempted: dict[tuple[str, str], int] = {}
    notes = apply_desired_state(reg, state, attempted)
    assert notes == []
    assert reg.record("scorer", "1").state is VersionState.READY
    assert reg.record("scorer", "4").state is VersionState.FAILED
    plan.default = "4"  # FAILED: the default must not move
    state.revision = 2
    notes = apply_desired_state(reg, state, attempted)
    assert reg.default_version("scorer") == "2"
    assert any("default stays '2'" in note for note in notes)
    plan.default = "1"
    state.revision = 3
    apply_desired_state(reg, state, attempted)
    assert reg.default_version("scorer") == "1"
    assert reg.get("scorer").version == "1"
    unloaded: list[tuple[str, str]] = []
    plan.default, plan.unload, state.revision = "2", ["1"], 4
    apply_desired_state(reg, state, attempted, on_unload=lambda m, v: unloaded.append((m, v)))
    assert reg.default_version("scorer") == "2"
    assert [r.version for r in reg.records("scorer")] == ["2", "4"]
    assert unloaded == [("scorer", "1")]


def test_a_failed_version_is_retried_only_when_asked_again(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    state = DesiredState(1)
    plan = state.plan("scorer")
    plan.load, plan.load_revisions = ["4"], {"4": 1}
    attempted: dict[tuple[str, str], int] = {}
    apply_desired_state(reg, state, attempted)
    failed = reg.record("scorer", "4")
    state.revision = 2  # an unrelated change
    apply_desired_state(reg, state, attempted)
    assert reg.record("scorer", "4") is failed  # not reloaded
    plan.load_revisions["4"] = 3
    state.revision = 3
    apply_desired_state(reg, state, attempted)
    assert reg.record("scorer", "4") is not failed


def test_watcher_reports_and_files_round_trip(tmp_path: Path) -> None:
    reg = registry(tmp_path / "svc")
    directory = tmp_path / "state"
    directory.mkdir()
    state = DesiredState(5)
    state.plan("scorer").load = ["1"]
    write_desired_state(directory, state)
    assert read_desired_state(directory).to_json() == state.to_json()
    watcher = RolloutWatcher(reg, directory)
    watcher.sync()
    watcher.start()
    (report,) = read_worker_statuses(directory).values()
    assert report["revision"] == 5
    assert report["models"]["scorer"]["versions"]["1"]["state"] == "READY"
    watcher.stop()
    assert read_worker_statuses(directory) == {}


def test_a_fresh_worker_unloads_its_configured_default_once_the_new_one_is_in_place(
    tmp_path: Path,
) -> None:
    reg = registry(tmp_path)  # a replacement worker: it starts on the configured default "2"
    state = DesiredState(5)
    plan = state.plan("scorer")
    plan.load, plan.load_revisions, plan.default, plan.unload = ["1"], {"1": 1}, "1", ["2"]
    unloaded: list[tuple[str, str]] = []
    notes = apply_desired_state(reg, state, on_unload=lambda m, v: unloaded.append((m, v)))
    assert notes == []
    assert reg.default_version("scorer") == "1"
    assert [r.version for r in reg.records("scorer")] == ["1"]
    assert unloaded == [("scorer", "2")]
