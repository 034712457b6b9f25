"""Build a version's ``profile.json`` from a data file or from its prediction log."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from servinglib.config.spec import ServiceConfig, load_config
from servinglib.lifecycle.registry import ModelRegistry, VersionRecord
from servinglib.lifecycle.store import require_synced
from servinglib.monitoring.drift.profile import (
    Profile,
    ProfileError,
    WindowSpec,
    build_profile,
    default_profile_path,
)
from servinglib.monitoring.drift.sources import read_prediction_log

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
    columns: Sequence[str] | None = None,
    progress: bool = False,
    note: Callable[[str], None] = lambda message: None,
) -> tuple[Path, Profile]:
    """Profile one version and write ``profile.json`` into its directory.

    With ``data``, each row is a request's features: the columns the model's
    ``input_schema`` declares (or ``columns``), read with its types by the reader
    ``batch-predict`` uses; unless ``with_outputs`` is False the version is loaded and
    answers the rows in batches, so its outputs are profiled too. With ``log_since_s``,
    the version's logged answers of that period are used as they are. ``note`` receives
    what the user should know (columns left out, rows that failed).

    Raises:
        ProfileError, ConfigError, ModelLoadError: naming what is wrong.
    """
    problems = (window or WindowSpec()).problems()
    if problems:
        raise ProfileError(problems[0])
    config = load_config(config_path)
    require_synced(config)  # a URL repository's versions, as batch-predict reads them
    registry = ModelRegistry(config)
    record = registry.record(model, version)
    rows: list[tuple[Any, Any]]
    if data is not None:
        rows = _rows_of_file(config, record, data, with_outputs, columns, progress, note)
        source = str(data)
    elif log_since_s is not None:
        log_url = config.prediction_log.read_url() if config.prediction_log else None
        if log_url is None:
            raise ProfileError(
                f"{config_path}: no monitoring.prediction_log url or parquet sink; "
                "profile a data file"
            )
        logged = read_prediction_log(log_url, model, version, log_since_s)
        rows = [(f, o) for _, f, o in logged]
        source = f"prediction log, last {log_since_s:g} s"
    else:
        raise ProfileError("nothing to profile: give --data FILE or --from-log DURATION")
    profile = build_profile(rows, window or WindowSpec(), source)
    path = default_profile_path(record.path)
    profile.save(path)
    url = next(m.repository_url for m in config.models if m.name == model)
    if url is not None:
        note(
            f"model {model!r} is served from {url}: {path} is in this machine's cache only "
            "and store versions are immutable; profile the local copy before servinglib "
            "publish, or publish it with this profile as a new version"
        )
    return path, profile


def _rows_of_file(
    config: ServiceConfig,
    record: VersionRecord,
    data: Path,
    with_outputs: bool,
    columns: Sequence[str] | None,
    progress: bool,
    note: Callable[[str], None],
) -> list[tuple[Any, Any]]:
    from servinglib.drift_offline.outputs import predict_rows
    from servinglib.serving.assembly import Purpose, load_service
    from servinglib.tabular import read_feature_rows

    model_config = next(m for m in config.models if m.name == record.model)
    table = read_feature_rows(data, model_config.input_schema, model=record.model, columns=columns)
    if table.plan.dropped and columns is None:
        note(
            f"columns {list(table.plan.dropped)} are not features of model {record.model!r} "
            "(its input_schema does not declare them): not profiled; choose with --columns"
        )
    outputs: list[Any] = [None] * len(table.rows)
    errors = table.errors
    if with_outputs:
        loaded = load_service(config, Purpose.SCORE, model=record.model, version=record.version)
        record = loaded.registry.record(record.model, record.version)
        if record.instance is None:
            loaded.close()
            raise ProfileError(
                f"model {record.model!r} version {record.version!r} did not load "
                f"({record.reason}); fix it or pass --no-outputs"
            )
        batch_size = model_config.batching.max_batch_size if model_config.batching else 256
        try:
            outputs, errors = predict_rows(
                record.instance,
                table.rows,
                table.errors,
                model_config.input_schema,
                batch_size=batch_size,
                progress=progress,
            )
        finally:
            loaded.close()
    failed = [(i, e) for i, e in enumerate(errors) if e is not None]
    if failed:
        row, first = failed[0]
        note(
            f"{len(failed):,} of {len(errors):,} rows failed and have no output (row "
            f"{row + 1}: {first})"
        )
        if len(failed) == len(errors) and errors:
            raise ProfileError(
                f"every row of {data} failed, so there is nothing to profile; row {row + 1}: "
                f"{first}"
            )
    return list(zip(table.rows, outputs, strict=True))
