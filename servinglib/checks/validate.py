"""``servinglib validate``: the config and everything it references, loading no model."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema

from servinglib.config.spec import ModelConfig, ServiceConfig, load_config
from servinglib.errors import ServinglibError
from servinglib.lifecycle.artifacts import find_pickles, verify_sha256
from servinglib.lifecycle.importing import import_model_class
from servinglib.lifecycle.registry import discover_versions
from servinglib.lifecycle.selftest import TEST_DATA_FILE, load_test_data
from servinglib.lifecycle.store import sync_service
from servinglib.model import Model, SelfTestCase
from servinglib.runtimes.tabular import ARTIFACTS as TABULAR_ARTIFACTS
from servinglib.runtimes.tabular import artifact_refusal
from servinglib.shadow.comparators import make_comparator

__all__ = ["validate_service"]


def validate_service(config_path: str | os.PathLike[str]) -> tuple[ServiceConfig | None, list[str]]:
    """Check the config and everything it references, loading no model.

    Returns:
        The config (None when it is itself invalid) and every problem found.

    Example::

        config, problems = validate_service("servinglib.yaml")
    """
    try:
        config = load_config(config_path)
    except ServinglibError as e:
        return None, list(getattr(e, "problems", None) or [str(e)])
    problems = [
        f"{config.source}: model {model!r}: {error}"
        for model, error in sync_service(config).items()  # URL repositories, into the cache
    ]
    for model in config.models:
        problems += _check_model(config, model)
    return config, problems


def _check_model(config: ServiceConfig, model: ModelConfig) -> list[str]:
    where = f"{config.source}: {model.key_path} ({model.name})"
    problems: list[str] = []
    cls: type[Model] | None = None
    try:
        cls = import_model_class(model.class_ref, config.root, config.python_path)
    except ServinglibError as e:
        problems.append(f"{where}.class: {e}")
    for i, shadow in enumerate(model.shadows):
        if shadow.comparator.kind == "custom":
            try:
                make_comparator(shadow.comparator, config.root, config.python_path)
            except ServinglibError as e:
                problems.append(f"{where}.shadow[{i}].comparator: {e}")
    versions = discover_versions(model)
    if not versions:
        problems.append(f"{where}.repository: no version directories in {model.repository}")
    if model.default_version not in versions:
        problems.append(
            f"{where}.default_version: {model.default_version!r} has no directory in "
            f"{model.repository}; versions found: {versions}"
        )
    for version in versions:
        path = model.repository / version
        if not path.is_dir():
            problems.append(f"{where}.versions: {version!r} has no directory {path}")
            continue
        problems += _profile_problems(path)
        problems += _artifact_problems(model, version, path, where)
        try:
            cases = load_test_data(path)
        except ServinglibError as e:
            problems.append(str(e))
            continue
        # A class that overrides Model.self_test_cases declares its cases in code, which only
        # loading can run (`servinglib selftest` does); any other version needs the file.
        declares_cases = cls is not None and _declares_cases(cls)
        if not cases and model.require_self_tests and not declares_cases:
            problems.append(
                f"{where}: version {version!r} has no {path / TEST_DATA_FILE}; add self-test "
                "cases (docs/reference/test-data.md), declare them in self_test_cases(), or "
                "set require_self_tests: false"
            )
        problems += _cases_outside_schema(model.input_schema, cases, path / TEST_DATA_FILE)
    return problems


def _artifact_problems(model: ModelConfig, version: str, path: Path, where: str) -> list[str]:
    """What the loader would refuse in a version's files: a broken sha256 pin, pickle data,
    an artifact its standard runtime refuses (a missing file, an untrusted skops type)."""
    problems = []
    prefix = f"{version}/"
    pins = {k.removeprefix(prefix): v for k, v in model.sha256.items() if k.startswith(prefix)}
    try:
        verify_sha256(path, pins)
    except ServinglibError as e:
        problems.append(f"{where}: version {version!r}: {e}")
    loaded: list[Path] = []
    runtime = model.runtime or ""
    if runtime in TABULAR_ARTIFACTS:
        refusal = artifact_refusal(
            runtime,
            path,
            path.name,
            model.runtime_options,
            allow_pickle=model.allow_pickle,
            pinned=model.sha256,
        )
        if refusal is not None:
            problems.append(f"{where}: version {version!r}: {refusal}")
        loaded = [path / name for name in TABULAR_ARTIFACTS[runtime]]  # judged just above
    pickles = [] if model.allow_pickle else [p for p in find_pickles(path) if p not in loaded]
    if pickles:
        names = ", ".join(str(p.relative_to(path)) for p in pickles)
        problems.append(
            f"{where}: version {version!r}: {names} is pickle data, which runs code when "
            "loaded, so the server refuses to load it; convert it to a safe format (ONNX, "
            "safetensors, .npz of numeric arrays, JSON) or set allow_pickle: true for this model"
        )
    return problems


def _profile_problems(version_dir: Path) -> list[str]:
    """A version's drift profile, when it has one, must load (it is versioned with the model)."""
    from servinglib.monitoring.drift.profile import Profile, default_profile_path

    path = default_profile_path(version_dir)
    if not path.is_file():
        return []
    try:
        Profile.load(path)
    except ServinglibError as e:
        return [str(e)]
    return []


def _declares_cases(cls: type[Model]) -> bool:
    return cls.self_test_cases is not Model.self_test_cases


def _cases_outside_schema(
    schema: Mapping[str, Any] | None, cases: Sequence[SelfTestCase], source: os.PathLike[str]
) -> list[str]:
    """Cases whose input the server would refuse (400) under the model's ``input_schema``."""
    if schema is None:
        return []
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for i, case in enumerate(cases):
        error = jsonschema.exceptions.best_match(validator.iter_errors(case.input))
        if error is not None:
            field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.path)
            problems.append(
                f"{source}: cases[{i}] ({case.name!r}).input{field}: {error.message}; the "
                "server refuses this input under the model's input_schema: fix the case or "
                "the schema"
            )
    return problems
