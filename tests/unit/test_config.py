"""servinglib.config.spec: schema validation, error messages, overrides, path containment."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from servinglib.compose.spec import EnsembleVersion, Member
from servinglib.config.spec import (
    AdminConfig,
    BatchPolicy,
    ComparatorConfig,
    ModelCacheConfig,
    ModelConfig,
    ModelSyncConfig,
    PredictionLogConfig,
    ServerConfig,
    ServiceConfig,
    ShadowConfig,
    ShadowExecutorConfig,
    config_schema,
    load_config,
)
from servinglib.errors import ConfigError

MODEL = """
  - name: eta
    class: models.eta:EtaModel
    repository: models/eta
    default_version: "1"
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "models" / "eta" / "1").mkdir(parents=True, exist_ok=True)
    path = tmp_path / "servinglib.yaml"
    path.write_text(text)
    return path


def test_valid_config_loads_with_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "service: eta-service\nmodels:" + MODEL), environ={})
    assert config.service == "eta-service"
    assert config.server.workers == 2
    assert config.server.keepalive_s > 60  # above Envoy's upstream idle timeout
    (model,) = config.models
    assert model.repository == (tmp_path / "models" / "eta").resolve()
    assert model.default_version == "1"
    assert model.require_self_tests is True


def test_unknown_key_names_file_key_path_and_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "service: s\nmodels:" + MODEL + "    default_verison: '2'\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    message = str(info.value)
    assert str(path) in message
    assert "models[0]" in message
    assert "'default_verison'" in message
    assert "did you mean 'default_version'" in message


def test_a_removed_key_says_what_replaced_it(tmp_path: Path) -> None:
    text = "service: s\nmodels:" + MODEL + "monitoring:\n  score_buckets: [0, 1]\n"
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), environ={})
    message = str(info.value)
    assert "monitoring" in message
    assert "'score_buckets' is no longer supported" in message
    assert "servinglib profile" in message


def test_missing_required_key_says_add_it(tmp_path: Path) -> None:
    path = write(
        tmp_path, "service: s\nmodels:\n  - name: eta\n    class: a:B\n    repository: models/eta\n"
    )
    with pytest.raises(
        ConfigError, match=r"models\[0\].*'default_version' is a required property; add it"
    ):
        load_config(path, environ={})


@pytest.mark.parametrize("name", ["Eta", "eta model", "-eta", "../eta", "e" * 65])
def test_model_names_must_be_dns_safe(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, "service: s\nmodels:" + MODEL.replace("name: eta", f"name: '{name}'"))
    with pytest.raises(ConfigError, match=r"models\[0\]\.name.*lower-case"):
        load_config(path, environ={})


def test_every_problem_is_listed(tmp_path: Path) -> None:
    path = write(tmp_path, "service: S\nserver: {workers: 0}\nmodels:" + MODEL)
    with pytest.raises(ConfigError, match="2 problems") as info:
        load_config(path, environ={})
    assert "server.workers" in str(info.value)
    assert "service" in str(info.value)


def test_environment_overrides_server_settings(tmp_path: Path) -> None:
    path = write(tmp_path, "service: s\nserver: {workers: 2}\nmodels:" + MODEL)
    config = load_config(path, environ={"SERVINGLIB_WORKERS": "5", "SERVINGLIB_HOST": "0.0.0.0"})
    assert config.server.workers == 5
    assert config.server.host == "0.0.0.0"
    timeout = load_config(path, environ={"SERVINGLIB_HEADER_TIMEOUT_S": "2.5"}).server
    assert timeout.header_timeout_s == 2.5


def test_a_number_override_that_is_not_one_names_the_variable(tmp_path: Path) -> None:
    path = write(tmp_path, "service: s\nmodels:" + MODEL)
    with pytest.raises(ConfigError, match=r"\$SERVINGLIB_HEADER_TIMEOUT_S.*'soon' is not a number"):
        load_config(path, environ={"SERVINGLIB_HEADER_TIMEOUT_S": "soon"})


def test_bad_environment_override_names_the_variable(tmp_path: Path) -> None:
    path = write(tmp_path, "service: s\nmodels:" + MODEL)
    with pytest.raises(ConfigError, match=r"\$SERVINGLIB_PORT.*'eighty' is not an integer"):
        load_config(path, environ={"SERVINGLIB_PORT": "eighty"})
    with pytest.raises(ConfigError, match=r"server\.log_level"):
        load_config(path, environ={"SERVINGLIB_LOG_LEVEL": "loud"})


def test_repository_outside_the_config_directory_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "service: s\nmodels:" + MODEL.replace("models/eta", "../../etc"))
    with pytest.raises(ConfigError, match=r"models\[0\]\.repository.*outside"):
        load_config(path, environ={})


def test_missing_repository_directory(tmp_path: Path) -> None:
    path = write(tmp_path, "service: s\nmodels:" + MODEL.replace("models/eta", "models/nope"))
    with pytest.raises(ConfigError, match="is not a directory"):
        load_config(path, environ={})


def test_default_version_must_be_among_listed_versions(tmp_path: Path) -> None:
    path = write(tmp_path, "service: s\nmodels:" + MODEL + "    versions: ['2', '3']\n")
    with pytest.raises(ConfigError, match=r"default_version '1' is not in versions"):
        load_config(path, environ={})


def test_duplicate_model_names(tmp_path: Path) -> None:
    path = write(tmp_path, "service: s\nmodels:" + MODEL + MODEL)
    with pytest.raises(ConfigError, match="declared twice"):
        load_config(path, environ={})


def test_invalid_input_schema(tmp_path: Path) -> None:
    path = write(tmp_path, "service: s\nmodels:" + MODEL + "    input_schema: {type: 12}\n")
    with pytest.raises(ConfigError, match=r"input_schema: not a valid JSON Schema"):
        load_config(path, environ={})


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "absent.yaml", environ={})
    bad = tmp_path / "bad.yaml"
    bad.write_text("service: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad, environ={})


# Where each object of the JSON Schema lands: its properties' defaults (documentation for
# editors and the generated reference) must be the dataclass's, which are the ones applied.
ENSEMBLE = ("$defs", "model", "properties", "ensemble")
SCHEMA_OBJECTS: list[tuple[tuple[str, ...], type]] = [
    (("properties", "server"), ServerConfig),
    (("properties", "shadow_executor"), ShadowExecutorConfig),
    (("properties", "admin"), AdminConfig),
    (("$defs", "model"), ModelConfig),
    (("$defs", "model", "properties", "shadow", "items"), ShadowConfig),
    (("$defs", "model", "properties", "batching"), BatchPolicy),
    (("$defs", "prediction_log"), PredictionLogConfig),
    (("$defs", "comparator"), ComparatorConfig),
    ((*ENSEMBLE, "additionalProperties"), EnsembleVersion),
    ((*ENSEMBLE, "additionalProperties", "properties", "members", "items"), Member),
    (("properties", "model_cache"), ModelCacheConfig),
    (("$defs", "model", "properties", "model_sync"), ModelSyncConfig),
]


@pytest.mark.parametrize(
    ("path", "cls"), SCHEMA_OBJECTS, ids=[cls.__name__ for _, cls in SCHEMA_OBJECTS]
)
def test_schema_defaults_equal_the_dataclass_defaults(path: tuple[str, ...], cls: type) -> None:
    node = config_schema()
    for key in path:
        node = node[key]
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    documented = {
        key: spec["default"] for key, spec in node["properties"].items() if "default" in spec
    }
    assert documented, f"no defaults under {path}"
    for key, value in documented.items():
        assert key in defaults, f"{'/'.join(path)}: {key} has a default but no field"
        assert defaults[key] == value, f"{cls.__name__}.{key}: {defaults[key]!r} != {value!r}"


def test_every_schema_default_is_checked_against_a_dataclass() -> None:
    checked = {path for path, _ in SCHEMA_OBJECTS}
    found: list[tuple[str, ...]] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            if any(
                isinstance(v, dict) and "default" in v for v in node.get("properties", {}).values()
            ):
                found.append(path)
            for key, child in node.items():
                walk(child, (*path, key))

    walk(config_schema(), ())
    # runtime_options are read by the runtimes (ONNX Runtime session settings), not config.
    runtime = ("$defs", "model", "properties", "runtime_options")
    assert set(found) - {runtime} == checked


def test_absent_keys_take_the_dataclass_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "service: eta-service\nmodels:" + MODEL), environ={})
    model = config.models[0]
    assert model.routing_header == ModelConfig.routing_header
    assert model.deadline_ms == ModelConfig.deadline_ms
    assert model.load_timeout_s == ModelConfig.load_timeout_s
    assert config.team == ServiceConfig.team


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("linger_ms: -5", r"sinks\[0\]: `linger_ms`: -5 is below the minimum 0 .*at least 0"),
        (
            "compression: zstdd",
            r"`compression`: 'zstdd' is not one of \[.*\] \(did you mean 'zstd'",
        ),
        ("type: kafk", r"sinks\[0\]: set `type` to one of \['kafka', 'parquet'\], got 'kafk'"),
    ],
)
def test_a_bad_sink_setting_names_the_setting_and_its_allowed_values(
    tmp_path: Path, setting: str, message: str
) -> None:
    sink = "{type: kafka, topic: t, bootstrap_servers: 'k:9092', " + setting + "}"
    text = "service: s\nmodels:" + MODEL + "monitoring:\n  prediction_log:\n    sinks:\n"
    with pytest.raises(ConfigError, match=message) as raised:
        load_config(write(tmp_path, text + f"      - {sink}\n"), environ={})
    assert "`class`" not in str(raised.value)
