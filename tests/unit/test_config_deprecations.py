"""Deprecated config keys keep working for a while, and say what replaces them and when."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from servinglib.config.deprecations import RENAMED_KEYS, Renamed, apply_renames
from servinglib.config.spec import load_config
from servinglib.errors import ConfigError

RENAMES = (
    Renamed("server.max_body_bytes", "server.max_request_body_bytes", removed_in="0.4.0"),
    Renamed("models[].deadline", "models[].deadline_ms", removed_in="0.4.0"),
)


def test_a_deprecated_key_moves_to_its_replacement_with_a_warning_and_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = {
        "server": {"max_body_bytes": 1024},
        "models": [{"name": "a", "deadline": 50}, {"name": "b", "deadline_ms": 70}],
    }
    with (
        caplog.at_level(logging.WARNING, logger="servinglib.config"),
        pytest.warns(DeprecationWarning, match="is deprecated") as warned,
    ):
        moved = apply_renames(raw, "servinglib.yaml", RENAMES)
    assert moved["server"] == {"max_request_body_bytes": 1024}
    assert moved["models"] == [{"name": "a", "deadline_ms": 50}, {"name": "b", "deadline_ms": 70}]
    messages = [str(w.message) for w in warned]
    assert messages == [
        "servinglib.yaml: `server.max_body_bytes` is deprecated and will be removed in "
        "servinglib 0.4.0; use `server.max_request_body_bytes` instead",
        "servinglib.yaml: `models[].deadline` is deprecated and will be removed in "
        "servinglib 0.4.0; use `models[].deadline_ms` instead",
    ]
    assert [r.getMessage() for r in caplog.records] == messages


def test_setting_both_names_is_refused_naming_the_one_to_keep() -> None:
    raw = {"server": {"max_body_bytes": 1, "max_request_body_bytes": 2}}
    with pytest.raises(ConfigError) as caught:
        apply_renames(raw, "servinglib.yaml", RENAMES)
    assert "keep only `server.max_request_body_bytes`" in str(caught.value)


def test_nothing_is_deprecated_today_and_a_current_config_loads_without_warnings(
    tmp_path: Path,
) -> None:
    assert RENAMED_KEYS == ()
    model = tmp_path / "models" / "m"
    (model / "1").mkdir(parents=True)
    (tmp_path / "servinglib.yaml").write_text(
        "service: s\nmodels:\n  - name: m\n    class: models/m/model.py:M\n"
        "    repository: models/m\n    default_version: '1'\n"
    )
    config = load_config(tmp_path / "servinglib.yaml")  # filterwarnings=error would raise
    assert [m.name for m in config.models] == ["m"]
