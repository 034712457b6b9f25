"""Build a version's ``profile.json`` from a data file or from its prediction log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servinglib.config.spec import load_config
from servinglib.monitoring.drift.profile import (
    Profile,
    ProfileError,
    WindowSpec,
    build_profile,
    default_profile_path,
)
from servinglib.monitoring.drift.sources import read_data_file, read_prediction_log

__all__ = ["profile_version"]


def profile_version(
    config_path: str | Path,
    model: str,
    version: str,
    *,
    data: Path | None = None,
    log_since_s: float | None = None,
    with_outputs: bool = True,
    window: WindowSpec | None = None,
) -> tuple[Path, Profile]:
    """Profile one version and write ``profile.json`` into its directory.

    With ``data``, each row is a request's features; unless ``with_outputs`` is False the
    version is loaded and answers every row, so its outputs are profiled too. With
    ``log_since_s``, the version's logged answers of that period are used as they are.

    Raises:
        ProfileError, ConfigError, ModelLoadError: naming what is wrong.
    """
    from servinglib.lifecycle.registry import ModelRegistry

    problems = (window or WindowSpec()).problems()
    if problems:
        raise ProfileError(problems[0])
    config = load_config(config_path)
    registry = ModelRegistry(config)
    record = registry.record(model, version)
    rows: list[tuple[Any, Any]]
    if data is not None:
        features = read_data_file(data)
        outputs: list[Any] = [None] * len(features)
        if with_outputs:
            registry.load_version(registry.model_config(model), record)
            if record.instance is None:
                raise ProfileError(
                    f"model {model!r} version {version!r} did not load ({record.reason}); "
                    "fix it or pass --no-outputs"
                )
            outputs = [record.instance.predict(record.instance.prepare(f)) for f in features]
        rows = list(zip(features, outputs, strict=True))
        source = str(data)
    elif log_since_s is not None:
        if config.prediction_log is None:
            raise ProfileError(
                f"{config_path}: no monitoring.prediction_log configured; profile a data file"
            )
        logged = read_prediction_log(config.prediction_log.url, model, version, log_since_s)
        rows = [(f, o) for _, f, o in logged]
        source = f"prediction log, last {log_since_s:g} s"
    else:
        raise ProfileError("nothing to profile: give --data FILE or --from-log DURATION")
    profile = build_profile(rows, window or WindowSpec(), source)
    path = default_profile_path(record.path)
    profile.save(path)
    return path, profile
