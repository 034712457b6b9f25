"""The output directory's lock, manifest ownership and the call guard, in this process."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from servinglib.batch._calls import ANSWERED, FIRST, SLOT_SIZE, STARTED, STOP, UNIT, CallGuard
from servinglib.batch._lock import OutputLock
from servinglib.batch._manifest import PartStats, is_own, own_names
from servinglib.errors import ConfigError


def test_a_held_lock_refuses_a_second_holder_naming_the_first(tmp_path: Path) -> None:
    first = OutputLock(tmp_path)
    first.acquire()
    try:
        with pytest.raises(ConfigError, match=r"in use by another batch job \(pid \d+ on host"):
            OutputLock(tmp_path).acquire()  # a second open file: flock conflicts
    finally:
        first.release()
    (tmp_path / "_lock").write_text(json.dumps({"pid": 1, "host": "gone", "started": 0}))
    with OutputLock(tmp_path) as again:  # nobody holds the flock: taken over
        assert again.previous == {"pid": 1, "host": "gone", "started": 0}


def test_only_part_names_a_manifest_lists_are_its_own() -> None:
    manifest = {
        "job": {},
        "parts": {"part-00000.parquet": None, "../input.parquet": None, "notes.txt": None},
        "files": ["part-00001.parquet", "/etc/passwd"],
    }
    own = own_names(manifest)
    assert own == {"_manifest.json", "_lock", "part-00000.parquet", "part-00001.parquet"}
    assert is_own(".part-00000.parquet.4242.tmp", own)
    assert is_own("._manifest.json.4242.tmp", own)
    assert not is_own(".notes.txt.4242.tmp", own)
    assert not is_own("part-99999.csv", own)
    stats = PartStats(10, 1, 123, "ab")
    assert PartStats.from_dict(stats.to_dict()) == stats


def test_the_guard_publishes_calls_and_presets_the_rows_that_hung() -> None:
    slot = multiprocessing.get_context("spawn").Array("d", SLOT_SIZE, lock=False)
    guard = CallGuard(slot, timeout_s=2)
    guard.locate(3, 100)
    seen: list[tuple[float, ...]] = []

    def predict(payloads: list[int]) -> list[int]:
        seen.append((slot[STARTED] > 0, slot[UNIT], slot[FIRST], slot[STOP]))
        return payloads

    assert guard.call(predict, [1, 2], [4, 7]) == [1, 2]
    assert seen == [(True, 3, 104, 108)]
    assert slot[STARTED] == 0
    assert slot[ANSWERED] == 1
    guard.hung[3] = frozenset({104, 105, 300})
    preset = guard.preset(50)  # rows 100-149 of unit 3
    assert [position for position, _ in preset] == [4, 5]
    assert preset[0][1].startswith("prediction timed out: ")
    assert "2 s" in preset[0][1]
    guard.locate(4, 0)
    assert guard.preset(50) == []


def test_suspect_rows_are_called_alone_and_the_rest_in_batches() -> None:
    guard = CallGuard()
    guard.locate(2, 100)
    assert guard.slices(range(10), 4) == [(0, 4), (4, 8), (8, 10)]
    guard.suspect[2] = frozenset({103, 104, 109})
    # positions 3, 4 and 9 alone; the others in calls of at most 4
    assert guard.slices(range(10), 4) == [(0, 3), (3, 4), (4, 5), (5, 9), (9, 10)]
    assert guard.slices([0, 3, 5], 4) == [(0, 1), (1, 2), (2, 3)]  # rows 103 and 105 valid
