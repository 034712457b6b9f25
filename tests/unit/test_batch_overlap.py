"""An output directory that overlaps the input is refused, however the paths are spelled."""

from __future__ import annotations

from pathlib import Path

import pytest

from servinglib.batch._overlap import check_no_overlap
from servinglib.errors import ConfigError


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    (folder / "day=1").mkdir(parents=True)
    (folder / "day=1" / "part-00000-abc.snappy.parquet").write_bytes(b"PAR1")
    (folder / "part-00001-abc.snappy.parquet").write_bytes(b"PAR1")
    (tmp_path / "link").symlink_to(folder)
    return folder


@pytest.mark.parametrize(
    ("spec", "output"),
    [
        ("data", "data"),  # the same directory
        ("data", "."),  # the output holds the input directory
        ("data", "data/scores"),  # nested in the input
        ("data", "link"),  # through a symlink to the input
        ("link", "data/day=1"),
        ("data/*.parquet", "data"),  # a glob whose files live in the output
        ("data/*.parquet", "link"),
        ("data/day=1/part-00000-abc.snappy.parquet", "data"),  # a single file
        ("data/day=1/part-00000-abc.snappy.parquet", "link/day=1"),
        ("data/**/*.parquet", "data/scores"),  # a glob that would read the parts next time
        ("data/*/*.json", "data/new"),  # the manifest would match
    ],
)
def test_an_overlapping_output_is_refused(
    data: Path, spec: str, output: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(data.parent)
    with pytest.raises(ConfigError, match="outside the input"):
        check_no_overlap(spec, output)


@pytest.mark.parametrize(
    ("spec", "output"),
    [
        ("data", "scores"),
        ("data/*.parquet", "data-scores"),
        ("data/*.parquet", "data/scores"),  # one level down: the glob cannot reach its parts
        ("data/day=1/part-00000-abc.snappy.parquet", "data/scores"),
        ("link", "scores"),
    ],
)
def test_a_separate_output_is_accepted(
    data: Path, spec: str, output: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(data.parent)
    check_no_overlap(spec, output)
