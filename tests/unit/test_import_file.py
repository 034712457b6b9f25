"""servinglib.testing.import_file: files of the same name in different folders never collide."""

from __future__ import annotations

from pathlib import Path

import pytest

from servinglib.errors import ModelLoadError
from servinglib.testing import import_file


def test_same_file_name_in_two_folders_gives_two_modules_each_imported_once(
    tmp_path: Path,
) -> None:
    for team in ("a", "b"):
        (tmp_path / team).mkdir()
        (tmp_path / team / "train.py").write_text(
            f"TEAM = {team!r}\nimport itertools\nCOUNTER = itertools.count()\n"
        )
    first = import_file(tmp_path / "a" / "train.py")
    second = import_file(tmp_path / "b" / "train.py")
    assert (first.TEAM, second.TEAM) == ("a", "b")
    assert first.__name__ != second.__name__
    assert import_file(tmp_path / "a" / ".." / "a" / "train.py") is first  # not re-executed


def test_a_missing_file_names_its_path(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"missing\.py does not exist"):
        import_file(tmp_path / "missing.py")


def test_two_services_with_a_models_package_each_get_their_own(tmp_path: Path) -> None:
    from servinglib.lifecycle.importing import import_object

    for team in ("eta", "fraud"):
        package = tmp_path / team / "collide_models"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "model.py").write_text(f"TEAM = {team!r}\n")
    assert import_object("collide_models.model:TEAM", tmp_path / "eta") == "eta"
    assert import_object("collide_models.model:TEAM", tmp_path / "fraud") == "fraud"
