"""Checks without a server: ``servinglib validate`` and ``servinglib selftest``."""

from __future__ import annotations

import os

from servinglib._importing import import_model_class
from servinglib.compose.calls import LaneCaller
from servinglib.config import ServiceConfig, load_config
from servinglib.errors import ServinglibError
from servinglib.registry import ModelRegistry, VersionRecord, discover_versions
from servinglib.selftest import load_test_data
from servinglib.service import InferenceService
from servinglib.shadow import make_comparator

__all__ = ["run_all_selftests", "validate_service"]


def validate_service(config_path: str | os.PathLike[str]) -> tuple[ServiceConfig | None, list[str]]:
    """Check the config and everything it references, loading no model.

    Returns:
        The config (None when it is itself invalid) and every problem found.
    """
    try:
        config = load_config(config_path)
    except ServinglibError as e:
        return None, [str(e)]
    problems: list[str] = []
    for model in config.models:
        where = f"{config.source}: {model.key_path} ({model.name})"
        try:
            import_model_class(model.class_ref, config.root, config.python_path)
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
            try:
                cases = load_test_data(path)
            except ServinglibError as e:
                problems.append(str(e))
                continue
            # A class may declare cases in code (Model.self_test_cases), which only loading
            # can tell; `servinglib selftest` checks those. A runtime model has no code.
            if not cases and model.require_self_tests and model.runtime is not None:
                problems.append(
                    f"{where}: version {version!r} has no {path / 'test_data.json'}; add self-test "
                    "cases or set require_self_tests: false"
                )
    return config, problems


def run_all_selftests(config: ServiceConfig) -> list[VersionRecord]:
    """Load and self-test every version of every model, as a worker would.

    Composed models call their members through a service's lanes, as in a worker; those
    stay open (idle threads) so the loaded versions can still answer afterwards.
    """
    caller = LaneCaller(threads=config.server.threads)
    registry = ModelRegistry(config, caller=caller)
    caller.bind(InferenceService(registry))
    registry.load_all()
    return [record for name in registry.model_names() for record in registry.records(name)]
