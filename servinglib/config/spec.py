"""Load ``servinglib.yaml``, validate it against the shipped JSON Schema, apply overrides.

Every error names the file, the key path and the fix::

    >>> load_config("servinglib.yaml")          # doctest: +SKIP
    ConfigError: servinglib.yaml: models[0].default_version: missing required key ...
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from servinglib.compose.checks import check_compositions
from servinglib.compose.spec import Composition, parse_composition
from servinglib.config.checks import (
    check_routed_versions,
    precomputed_fallback,
    resolve_inside,
    resolve_log_url,
)
from servinglib.config.deprecations import apply_renames
from servinglib.config.env import ENV_PREFIX, apply_env_overrides
from servinglib.config.rollout_policy import parse_rollout
from servinglib.config.schema_errors import validate_against_schema
from servinglib.config.sections import (
    AdminConfig,
    BatchPolicy,
    ComparatorConfig,
    ModelConfig,
    PredictionLogConfig,
    ServerConfig,
    ServiceConfig,
    ShadowConfig,
    ShadowExecutorConfig,
)
from servinglib.config.sinks import parse_sinks
from servinglib.config.storage import (
    ModelCacheConfig,
    ModelSyncConfig,
    cache_config,
    repository_of,
)
from servinglib.errors import ConfigError
from servinglib.model import TensorSpec

__all__ = [
    "ENV_PREFIX",
    "AdminConfig",
    "BatchPolicy",
    "ComparatorConfig",
    "ModelCacheConfig",
    "ModelConfig",
    "ModelSyncConfig",
    "PredictionLogConfig",
    "ServerConfig",
    "ServiceConfig",
    "ShadowConfig",
    "ShadowExecutorConfig",
    "config_schema",
    "load_config",
    "resolve_inside",
]


@cache
def config_schema() -> dict[str, Any]:
    """The JSON Schema of servinglib.yaml shipped in the package."""
    return _read_schema("servinglib.schema.json")


def _read_schema(name: str) -> dict[str, Any]:
    text = resources.files("servinglib.schema").joinpath(name).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def load_config(
    path: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> ServiceConfig:
    """Read, override from ``SERVINGLIB_*`` variables, validate and resolve a config file.

    Args:
        path: the servinglib.yaml file.
        environ: environment used for overrides; defaults to ``os.environ``.

    Raises:
        ConfigError: naming the file, key path and fix for the first problems found.
    """
    source = Path(path).resolve()
    label = str(path)
    try:
        raw = yaml.safe_load(source.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise ConfigError(
            "file not found; pass --config PATH or set SERVINGLIB_CONFIG", source=label
        ) from e
    except yaml.YAMLError as e:
        raise ConfigError(f"not valid YAML: {e}", source=label) from e
    if not isinstance(raw, dict):
        raise ConfigError(
            "the top level must be a mapping with `service` and `models`", source=label
        )
    raw = apply_renames(raw, label)
    server_schema = config_schema()["properties"]["server"]["properties"]
    raw = apply_env_overrides(raw, os.environ if environ is None else environ, server_schema)
    validate_against_schema(raw, config_schema(), label)
    return _build(raw, source, label)


RUNTIME_CLASSES = {
    "onnx": "servinglib.runtimes.onnx:OnnxModel",
    "torch": "servinglib.runtimes.torch:TorchModel",
    "precomputed": "servinglib.runtimes.precomputed:PrecomputedModel",
    "sklearn": "servinglib.runtimes.tabular.sklearn:SklearnModel",
    "xgboost": "servinglib.runtimes.tabular.xgboost:XGBoostModel",
    "lightgbm": "servinglib.runtimes.tabular.lightgbm:LightGBMModel",
}

# Runtimes that batch when `batching:` is absent: one call for a whole batch of rows.
BATCHED_RUNTIMES = frozenset({"sklearn", "xgboost", "lightgbm"})


COMPOSED_CLASS = "servinglib.compose.model:ComposedModel"


def _class_ref(entry: Mapping[str, Any], composition: Composition | None) -> str:
    if composition is not None:
        return COMPOSED_CLASS
    runtime = entry.get("runtime")
    return RUNTIME_CLASSES[runtime] if runtime else str(entry["class"])


def _tensors(raw: list[dict[str, Any]]) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(t["name"], t["datatype"], tuple(t["shape"])) for t in raw)


def _batch_policy(raw: Mapping[str, Any] | None, label: str, where: str) -> BatchPolicy | None:
    if raw is None:
        return None
    policy = BatchPolicy(
        **{**raw, "preferred_batch_sizes": tuple(raw.get("preferred_batch_sizes", ()))}
    )
    too_big = [p for p in policy.preferred_batch_sizes if p > policy.max_batch_size]
    if too_big:
        raise ConfigError(
            f"preferred_batch_sizes {too_big} exceed max_batch_size {policy.max_batch_size}",
            source=label,
            key_path=f"{where}.batching.preferred_batch_sizes",
        )
    if policy.default_priority >= policy.priority_levels:
        raise ConfigError(
            f"default_priority {policy.default_priority} needs priority_levels > it",
            source=label,
            key_path=f"{where}.batching.default_priority",
        )
    return policy


# Optional keys of a model entry that map one to one onto ModelConfig fields: absent keys
# take the dataclass's default, so every default lives in one place.
_MODEL_KEYS = (
    "runtime_options",
    "input_schema",
    "require_self_tests",
    "traffic",
    "instances",
    "deadline_ms",
    "load_timeout_s",
    "allow_pickle",
    "sha256",
    "optimize_budgets",
)


def _given(raw: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The entries of ``raw`` among ``keys`` (absent ones keep their dataclass default)."""
    return {key: raw[key] for key in keys if key in raw}


def _shadow(raw: Mapping[str, Any]) -> ShadowConfig:
    return ShadowConfig(
        version=raw["version"],
        comparator=ComparatorConfig(**raw.get("comparator", {})),
        **_given(raw, ("sample_rate", "timeout_ms")),
    )


def _prediction_log(
    monitoring: Mapping[str, Any], root: Path, label: str
) -> PredictionLogConfig | None:
    if "prediction_log" not in monitoring:
        return None
    settings = dict(monitoring["prediction_log"])
    if "url" in settings:
        settings["url"] = resolve_log_url(settings["url"], root, label)
    settings["url"] = settings.get("url")
    settings["sinks"] = parse_sinks(settings.get("sinks", []), root, label)
    return PredictionLogConfig(**settings)


def _build(raw: dict[str, Any], source: Path, label: str) -> ServiceConfig:
    root = source.parent
    server = ServerConfig(**raw.get("server", {}))
    python_path = tuple(
        resolve_inside(root, entry, label=label, key_path=f"python_path[{i}]")
        for i, entry in enumerate(raw.get("python_path", []))
    )
    cache = cache_config(raw.get("model_cache"), root)
    models: list[ModelConfig] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw["models"]):
        where = f"models[{i}]"
        name = entry["name"]
        if name in seen:
            raise ConfigError(
                f"model {name!r} is declared twice; give each model a unique name",
                source=label,
                key_path=f"{where}.name",
            )
        seen.add(name)
        repository, url = repository_of(entry, root, cache, label, where)
        composition = parse_composition(entry)
        versions = tuple(entry["versions"]) if "versions" in entry else None
        if versions is None and composition is not None:
            versions = tuple(composition.versions)
        default = entry["default_version"]
        if versions is not None and default not in versions:
            raise ConfigError(
                f"default_version {default!r} is not in versions {list(versions)}; add it or "
                "pick one of them",
                source=label,
                key_path=f"{where}.default_version",
            )
        if "input_schema" in entry:
            try:
                jsonschema.Draft202012Validator.check_schema(entry["input_schema"])
            except jsonschema.SchemaError as e:
                raise ConfigError(
                    f"not a valid JSON Schema: {e.message}",
                    source=label,
                    key_path=f"{where}.input_schema",
                ) from e
        runtime = entry.get("runtime")
        if url is None:  # a store's versions are known once it is synced
            check_routed_versions(entry, repository, label, where)
        given = _given(entry, _MODEL_KEYS)
        if "model_sync" in entry:
            given["model_sync"] = ModelSyncConfig(**entry["model_sync"])
        if runtime == "precomputed":  # its misses go to the fallback model's lane
            fallback = precomputed_fallback(entry, raw["models"], root, label, where)
            given["runtime_options"] = {
                **entry.get("runtime_options", {}),
                **({"fallback_model": fallback} if fallback is not None else {}),
            }
        if runtime == "sklearn":  # a pickled estimator loads only when allowed and pinned
            given["runtime_options"] = {
                **entry.get("runtime_options", {}),
                "allow_pickle": bool(entry.get("allow_pickle")),
                "sha256_pinned": sorted(entry.get("sha256", {})),
            }
        routing = entry.get("routing_key", {})
        if "header" in routing:
            given["routing_header"] = routing["header"].lower()
        if "feature" in routing:
            given["routing_feature"] = routing["feature"]
        models.append(
            ModelConfig(
                name=name,
                class_ref=_class_ref(entry, composition),
                runtime=runtime,
                inputs=_tensors(entry.get("inputs", [])),
                outputs=_tensors(entry.get("outputs", [])),
                repository=repository,
                repository_url=url,
                default_version=default,
                versions=versions,
                shadows=tuple(_shadow(s) for s in entry.get("shadow", [])),
                batching=_batch_policy(
                    entry.get("batching", {} if runtime in BATCHED_RUNTIMES else None), label, where
                ),
                composition=composition,
                rollout=parse_rollout(entry, raw, root, label, where),
                key_path=where,
                **given,
            )
        )
    check_compositions(models, label)
    return ServiceConfig(
        service=raw["service"],
        shadow_executor=ShadowExecutorConfig(**raw.get("shadow_executor", {})),
        admin=AdminConfig(**raw.get("admin", {})),
        model_cache=cache,
        prediction_log=_prediction_log(raw.get("monitoring", {}), root, label),
        **_given(raw, ("team",)),
        source=source,
        python_path=python_path,
        server=server,
        models=tuple(models),
    )
