"""Load the version a batch job scores with, as a server worker would: self-tests first."""

from __future__ import annotations

import dataclasses
from typing import Any

from servinglib.batch._features import FeatureSpec
from servinglib.batch._layout import OutputLayout
from servinglib.batch._scoring import BatchScorer
from servinglib.config.spec import ServiceConfig, load_config
from servinglib.lifecycle.registry import VersionRecord
from servinglib.serving.assembly import Purpose, load_service

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "first_selftest_output",
    "load_scorer",
    "load_version",
    "release_version",
    "scorer_for",
]

DEFAULT_BATCH_SIZE = 256  # for models without `batching:`; --batch-size overrides


def load_version(
    config_path: str, model: str, version: str | None, workers: int
) -> tuple[ServiceConfig, VersionRecord]:
    """Load one version as a worker would: artifacts, ``load()``, self-tests, warm-up.

    A composed model loads after the models it calls, and calls them through their lanes.

    Raises:
        ModelNotReadyError: the version FAILED (a self-test failed, ``load()`` raised ...).
    """
    config = load_config(config_path)
    # ONNX Runtime sizes its threads by cores / workers, as under gunicorn
    config = dataclasses.replace(config, server=dataclasses.replace(config.server, workers=workers))
    loaded = load_service(config, Purpose.SCORE, model=model, version=version)
    return config, loaded.ready_record(model, version)


def release_version(record: VersionRecord) -> None:
    """Drop this process's copy of the version: worker processes score with their own."""
    record.instance = None
    record.copies = []
    record.ready = None


def first_selftest_output(record: VersionRecord) -> Any:
    """What the version answered its first self-test input at warm-up (None without any)."""
    return record.example_output


def scorer_for(
    config: ServiceConfig,
    record: VersionRecord,
    features: FeatureSpec,
    layout: OutputLayout,
    batch_size: int,
) -> BatchScorer:
    """Wrap a READY version to score record batches under the server's input limits."""
    assert record.instance is not None
    model_config = next(m for m in config.models if m.name == record.model)
    features = dataclasses.replace(
        features,
        max_json_depth=config.server.max_json_depth,
        max_json_bytes=config.server.max_request_body_bytes,
    )
    return BatchScorer(
        record.instance,
        record.model,
        record.version,
        features,
        layout,
        model_config.input_schema,
        batch_size,
    )


def load_scorer(
    config_path: str,
    model: str,
    version: str | None,
    workers: int,
    features: FeatureSpec,
    layout: OutputLayout,
    batch_size: int,
) -> BatchScorer:
    """Load the version (self-tests first) and wrap it to score record batches."""
    config, record = load_version(config_path, model, version, workers)
    return scorer_for(config, record, features, layout, batch_size)
