"""servinglib.lifecycle.registry: the lifecycle state machine and version routing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servinglib.config.spec import load_config
from servinglib.errors import ModelNotFoundError, ModelNotReadyError, VersionNotFoundError
from servinglib.lifecycle.registry import ModelRegistry, VersionState

MODEL_CODE = """
from pathlib import Path
import servinglib

class Adder(servinglib.Model):
    def load(self, path: Path) -> None:
        self.offset = float((path / "offset.txt").read_text())

    def predict(self, features):
        return {"y": features["x"] + self.offset}

class BatchLiar(Adder):
    def predict_batch(self, batch):
        return [{"y": 0.0} for _ in batch]

class Declared(Adder):
    def self_test_cases(self):
        return [servinglib.SelfTestCase("declared", {"x": 1.0}, {"y": 100.0})]
"""


class Recorder:
    """A lifecycle listener that remembers what it was told."""

    def __init__(self) -> None:
        self.states: list[tuple[str, str, VersionState]] = []
        self.loaded: list[tuple[str, str]] = []
        self.tested: list[tuple[str, str, bool]] = []

    def version_state(self, model: str, version: str, state: VersionState) -> None:
        self.states.append((model, version, state))

    def version_loaded(self, model: str, version: str, duration_s: float) -> None:
        assert duration_s >= 0
        self.loaded.append((model, version))

    def version_self_tested(
        self, model: str, version: str, duration_s: float, passed: bool
    ) -> None:
        self.tested.append((model, version, passed))


def make_repo(
    tmp_path: Path,
    versions: dict[str, tuple[float | None, float]],
    cls: str = "Adder",
    default: str = "1",
    extra: str = "",
) -> Path:
    """versions: name -> (offset written to offset.txt or None for missing, expected y for x=1)."""
    (tmp_path / "adder.py").write_text(MODEL_CODE)
    for version, (offset, expected) in versions.items():
        directory = tmp_path / "repo" / version
        directory.mkdir(parents=True)
        if offset is not None:
            (directory / "offset.txt").write_text(str(offset))
        (directory / "test_data.json").write_text(
            json.dumps({"cases": [{"input": {"x": 1.0}, "expected": {"y": expected}}]})
        )
    config = tmp_path / "servinglib.yaml"
    config.write_text(
        f"service: s\nmodels:\n  - name: adder\n    class: adder.py:{cls}\n    repository: repo\n"
        f"    default_version: '{default}'\n{extra}"
    )
    return config


def test_lifecycle_of_a_good_version(tmp_path: Path) -> None:
    recorder = Recorder()
    registry = ModelRegistry(
        load_config(make_repo(tmp_path, {"1": (1.0, 2.0)}), environ={}), recorder
    )
    registry.load_all()
    assert [s for _, _, s in recorder.states] == [
        VersionState.DISCOVERED,
        VersionState.LOADING,
        VersionState.SELF_TEST,
        VersionState.WARMING,
        VersionState.READY,
    ]
    assert recorder.loaded == [("adder", "1")]
    assert recorder.tested == [("adder", "1", True)]
    assert registry.is_ready()
    record = registry.get("adder")
    assert record.instance is not None
    assert record.instance.predict({"x": 2.0}) == {"y": 3.0}


def test_failures_stay_with_their_version(tmp_path: Path) -> None:
    config = make_repo(
        tmp_path, {"1": (1.0, 2.0), "2": (None, 2.0), "3": (5.0, 2.0), "10": (9.0, 10.0)}
    )
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    states = {r.version: r.state for r in registry.records("adder")}
    assert states == {
        "1": VersionState.READY,
        "2": VersionState.FAILED,
        "3": VersionState.FAILED,
        "10": VersionState.READY,
    }
    assert [r.version for r in registry.records("adder")] == ["1", "2", "3", "10"]  # numeric order
    assert "load() raised FileNotFoundError" in registry.record("adder", "2").reason
    assert (
        "self-test 'case-0' failed: $.y: expected 2.0, got 6.0"
        in registry.record("adder", "3").reason
    )
    with pytest.raises(ModelNotReadyError, match="'3' is FAILED"):
        registry.get("adder", "3")
    assert registry.get("adder", "10").version == "10"
    assert registry.get("adder").version == "1"  # the highest version is not the default
    assert registry.is_ready()


def test_not_ready_when_default_version_failed(tmp_path: Path) -> None:
    config = make_repo(tmp_path, {"1": (1.0, 2.0), "2": (None, 0.0)}, default="2")
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    assert not registry.is_ready()
    assert registry.record("adder", "1").state is VersionState.READY
    ready = registry.get("adder", "1")  # a READY version always carries its instance
    assert ready.instance.predict({"x": 1.0}) == {"y": 2.0}
    assert ready.copies == (ready.instance,)


def test_unknown_model_and_version_list_what_exists(tmp_path: Path) -> None:
    registry = ModelRegistry(load_config(make_repo(tmp_path, {"1": (1.0, 2.0)}), environ={}))
    with pytest.raises(ModelNotFoundError, match="available models: adder"):
        registry.get("nope")
    with pytest.raises(VersionNotFoundError, match="available versions: 1"):
        registry.get("adder", "7")


def test_a_default_version_not_here_yet_is_not_ready_rather_than_unknown(
    tmp_path: Path,
) -> None:
    # A cold model cache (the store down at start): the default is configured but absent.
    config = make_repo(tmp_path, {"1": (1.0, 2.0)}, default="2")
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    assert not registry.is_ready()
    with pytest.raises(ModelNotReadyError, match=r"'2' is not loaded .*not in this worker yet"):
        registry.get("adder")  # a 503 with Retry-After: the version is expected
    with pytest.raises(VersionNotFoundError, match="available versions: 1"):
        registry.get("adder", "2")  # a request naming it: this worker has no such version
    assert registry.get("adder", "1").version == "1"


def test_version_without_self_tests_is_refused_unless_allowed(tmp_path: Path) -> None:
    config = make_repo(tmp_path, {"1": (1.0, 2.0)})
    (tmp_path / "repo" / "1" / "test_data.json").unlink()
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    assert "no self-test cases" in registry.record("adder", "1").reason
    config.write_text(config.read_text() + "    require_self_tests: false\n")
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    assert registry.record("adder", "1").state is VersionState.READY


def test_batch_path_must_agree_with_expected_outputs(tmp_path: Path) -> None:
    config = make_repo(tmp_path, {"1": (1.0, 2.0)}, cls="BatchLiar")
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    assert "predict_batch disagrees" in registry.record("adder", "1").reason


def test_cases_declared_in_code_also_run(tmp_path: Path) -> None:
    config = make_repo(tmp_path, {"1": (1.0, 2.0)}, cls="Declared")
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    record = registry.record("adder", "1")
    assert record.state is VersionState.FAILED
    assert "self-test 'declared' failed" in record.reason
    assert len(record.report.cases) == 2


def test_bad_class_reference_fails_every_version(tmp_path: Path) -> None:
    config = make_repo(tmp_path, {"1": (1.0, 2.0)}, cls="Missing")
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    assert "has no attribute 'Missing'" in registry.record("adder", "1").reason


def test_non_version_directories_are_skipped(tmp_path: Path) -> None:
    config = make_repo(tmp_path, {"1": (1.0, 2.0)})
    (tmp_path / "repo" / "__pycache__").mkdir()
    (tmp_path / "repo" / "Not A Version").mkdir()
    registry = ModelRegistry(load_config(config, environ={}))
    assert [r.version for r in registry.records("adder")] == ["1"]


def test_an_unloaded_version_can_be_collected_although_the_worker_froze_its_heap(
    tmp_path: Path,
) -> None:
    """Workers ``gc.freeze()`` what they loaded at start; unloading a version unfreezes it,
    or a version whose objects form reference cycles would never be freed."""
    import gc
    import weakref

    registry = ModelRegistry(
        load_config(make_repo(tmp_path, {"1": (1.0, 2.0), "2": (2.0, 3.0)}), environ={})
    )
    registry.load_all()
    instance = registry.get("adder", "2").instance
    instance.cycle = instance  # type: ignore[attr-defined]  # only the collector frees it
    gone = weakref.ref(instance)
    del instance
    gc.freeze()
    try:
        registry.remove_version("adder", "2")
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert gone() is None, "the unloaded version is still in memory"
    finally:
        gc.unfreeze()
