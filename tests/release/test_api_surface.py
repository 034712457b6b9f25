"""The public surface cannot change unannounced: every difference from the release snapshot
is named by a news fragment in ``changes/``."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "api_surface", ROOT / "release" / "api_surface.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["api_surface"] = module
    spec.loader.exec_module(module)
    return module


api_surface = _tool()


def test_every_difference_from_the_snapshot_is_announced() -> None:
    snapshot = json.loads(api_surface.SNAPSHOT.read_text())
    missing = api_surface.unannounced(api_surface.differences(snapshot, api_surface.surface()))
    assert not missing, (
        "the public surface changed without a news fragment naming each change:\n  "
        + "\n  ".join(missing)
        + "\nadd changes/<name>.<added|changed|deprecated|removed|fixed>.md naming each in "
        "backquotes (see CONTRIBUTING in docs/explanation/compatibility.md)"
    )


def test_the_surface_covers_names_config_metrics_and_the_command_line() -> None:
    current = api_surface.surface()
    assert current["python"]["servinglib.Model"] == "class(ABC)"
    assert current["python"]["servinglib.Model.predict"].startswith("def(self, features")
    assert "servinglib.testing.servinglib_client" in current["python"]
    assert "models[].batching.max_batch_size" in current["config"]
    assert "server.workers" in current["config"]
    assert current["metrics"]["servinglib_requests_total"].startswith("counter")
    assert "servinglib batch-predict --resume" in current["cli"]
    assert "servinglib serve --config" in current["cli"]


@pytest.mark.parametrize(
    ("part", "change", "line"),
    [
        ("python", ("servinglib.brand_new", "def()"), "python: added servinglib.brand_new"),
        ("metrics", ("servinglib_new_total", "counter[]"), "metrics: added servinglib_new_total"),
        ("config", "server.brand_new_key", "config: added server.brand_new_key"),
        ("cli", "servinglib serve --brand-new", "cli: added servinglib serve --brand-new"),
    ],
)
def test_an_unannounced_change_fails_until_a_fragment_names_it(
    tmp_path: Path, part: str, change: object, line: str
) -> None:
    snapshot = json.loads(api_surface.SNAPSHOT.read_text())
    changed = json.loads(json.dumps(snapshot))
    if isinstance(change, tuple):
        changed[part][change[0]] = change[1]
    else:
        changed[part] = sorted([*changed[part], change])
    lines = api_surface.differences(snapshot, changed)
    assert lines == [line]
    changes = tmp_path / "changes"
    changes.mkdir()
    assert api_surface.unannounced(lines, changes) == [line]
    name = line.split(" added ", 1)[1]
    (changes / "1.added.md").write_text(f"New `{name}`, for the test.\n")
    assert api_surface.unannounced(lines, changes) == []


def test_a_removed_or_changed_signature_is_a_difference() -> None:
    snapshot = json.loads(api_surface.SNAPSHOT.read_text())
    changed = json.loads(json.dumps(snapshot))
    del changed["python"]["servinglib.Model.predict"]
    changed["python"]["servinglib.Model.load"] = "def(self)"
    lines = api_surface.differences(snapshot, changed)
    assert "python: removed servinglib.Model.predict" in lines
    assert any(x.startswith("python: changed servinglib.Model.load (def(self, path") for x in lines)
