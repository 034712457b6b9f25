"""Every config value that sizes memory or disk has a limit; one past it is refused, naming the
key, the value, the limit and the fix (``load_config``, ``servinglib validate``, ``profile``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from servinglib.batch._job import MAX_BATCH_SIZE, MAX_WORKERS
from servinglib.config.spec import load_config
from servinglib.errors import ConfigError
from servinglib.monitoring.drift.profile import (
    MAX_WINDOW_SLOTS,
    Profile,
    ProfileError,
    WindowSpec,
)
from tests.conftest import FIXTURES, run_cli

# (key path in servinglib.yaml, limit): each sizes memory or disk of every worker.
LIMITS: list[tuple[tuple[str | int, ...], int]] = [
    (("server", "workers"), 256),
    (("server", "threads"), 1024),
    (("server", "max_connections"), 65536),
    (("server", "max_request_body_bytes"), 1 << 30),
    (("server", "max_tensor_elements"), 1 << 28),
    (("server", "max_header_bytes"), 65536),
    (("server", "max_headers"), 32768),
    (("shadow_executor", "max_concurrency"), 64),
    (("shadow_executor", "max_queue"), 10000),
    (("models", 0, "batching", "max_batch_size"), 8192),
    (("models", 0, "batching", "preferred_batch_sizes", 0), 8192),
    (("models", 0, "batching", "max_queue_size"), 100_000),
    (("models", 0, "batching", "priority_levels"), 64),
    (("models", 0, "instances"), 64),
    (("monitoring", "prediction_log", "max_buffer"), 1_000_000),
    (("monitoring", "prediction_log", "max_buffer_bytes"), 1 << 30),
    (("monitoring", "prediction_log", "max_record_bytes"), 1 << 24),
    (("monitoring", "prediction_log", "batch_size"), 10000),
]


def _key_path(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _config_with(tmp_path: Path, path: tuple[str | int, ...], value: int) -> Path:
    """The fixture service with ``path`` set to ``value`` (and what it needs around it)."""
    shutil.copytree(FIXTURES / "service" / "models", tmp_path / "models", dirs_exist_ok=True)
    raw: dict[str, Any] = yaml.safe_load((FIXTURES / "service" / "servinglib.yaml").read_text())
    raw.setdefault("monitoring", {})["prediction_log"] = {"url": "sqlite:///log.db"}
    raw["models"][0]["batching"] = {"max_batch_size": 8192}  # room for a preferred size
    raw["models"][0]["batching"]["preferred_batch_sizes"] = [1]
    node: Any = raw
    for part in path[:-1]:
        node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
    node[path[-1]] = value
    config = tmp_path / "servinglib.yaml"
    config.write_text(yaml.safe_dump(raw))
    return config


@pytest.mark.parametrize(("path", "limit"), LIMITS, ids=[_key_path(p) for p, _ in LIMITS])
def test_a_value_past_its_limit_is_refused_naming_key_value_limit_and_fix(
    tmp_path: Path, path: tuple[str | int, ...], limit: int
) -> None:
    load_config(_config_with(tmp_path, path, limit), environ={})  # the limit itself is fine
    with pytest.raises(ConfigError) as refused:
        load_config(_config_with(tmp_path, path, limit + 1), environ={})
    message = str(refused.value)
    assert refused.value.key_path == _key_path(path)
    assert f"{limit + 1} is above the limit {limit}" in message
    assert f"set it to at most {limit}" in message


def test_an_environment_override_past_its_limit_is_refused(tmp_path: Path) -> None:
    config = _config_with(tmp_path, ("server", "threads"), 8)
    with pytest.raises(ConfigError, match=r"server\.max_connections: 70000 is above the limit"):
        load_config(config, environ={"SERVINGLIB_MAX_CONNECTIONS": "70000"})


def test_validate_refuses_a_config_past_a_limit_with_exit_2(tmp_path: Path) -> None:
    config = _config_with(tmp_path, ("models", 0, "batching", "max_queue_size"), 10**9)
    result = run_cli("validate", "--config", str(config))
    assert result.returncode == 2, result.stderr
    assert "models[0].batching.max_queue_size: 1000000000 is above the limit 100000" in (
        result.stderr
    )
    assert "set it to at most 100000" in result.stderr


def test_profile_refuses_too_many_window_slots_before_reading_anything(tmp_path: Path) -> None:
    config = _config_with(tmp_path, ("server", "threads"), 8)
    result = run_cli(
        "profile",
        "--config",
        str(config),
        "--model",
        "scorer",
        "--version",
        "2",
        "--data",
        str(tmp_path / "absent.csv"),
        "--window-slots",
        "20000000",
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"--window-slots 20000000 is above the limit {MAX_WINDOW_SLOTS}" in result.stderr
    assert f"use at most {MAX_WINDOW_SLOTS}" in result.stderr
    assert not list((tmp_path / "models").rglob("profile.json"))


def test_validate_and_the_server_refuse_a_profile_with_too_many_slots(tmp_path: Path) -> None:
    config = _config_with(tmp_path, ("server", "threads"), 8)
    profile = tmp_path / "models" / "scorer" / "2" / "profile.json"
    document = {
        "format_version": 1,
        "source": "hand-written",
        "window": {"seconds": 600.0, "slots": 20_000_000, "requests": None},
        "fields": [],
    }
    profile.write_text(json.dumps(document))
    with pytest.raises(ProfileError, match=r"window\.slots 20000000 is above the limit"):
        Profile.load(profile)  # what the server's drift monitor reads
    result = run_cli("validate", "--config", str(config))
    assert result.returncode == 1
    assert "window.slots 20000000 is above the limit 1440" in result.stderr
    assert WindowSpec(600.0, MAX_WINDOW_SLOTS).problems() == []


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--workers", MAX_WORKERS + 1, f"use 1 to {MAX_WORKERS} (the limit)"),
        ("--batch-size", MAX_BATCH_SIZE + 1, f"use 1 to {MAX_BATCH_SIZE} (the limit"),
    ],
)
def test_batch_predict_refuses_workers_or_batch_size_past_the_limit(
    tmp_path: Path, flag: str, value: int, said: str
) -> None:
    config = _config_with(tmp_path, ("server", "threads"), 8)
    (tmp_path / "in.csv").write_text("x\n1.0\n")
    result = run_cli(
        "batch-predict",
        "--config",
        str(config),
        "--model",
        "scorer",
        "--input",
        str(tmp_path / "in.csv"),
        "--output",
        str(tmp_path / "out"),
        flag,
        str(value),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{flag} {value}: {said}" in result.stderr
    assert not (tmp_path / "out").exists()
