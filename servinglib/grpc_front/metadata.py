"""The answers of the non-inference RPCs: metadata, readiness, configuration, index, statistics.

Each is built from the same sources as its REST route (:mod:`servinglib.http.v2`): the
version catalog of the service, :mod:`servinglib.describe.triton_config`, and for statistics the
Prometheus counters every worker shares (so a statistic is the same whichever worker answers).
"""

from __future__ import annotations

from collections import defaultdict
from importlib.metadata import version as package_version
from typing import Any

from google.protobuf import json_format

from servinglib.describe.triton_config import (
    combiner_config_of,
    tensor_metadata,
    triton_model_config,
)
from servinglib.errors import InvalidInputError
from servinglib.grpc_front.proto import inference_pb2 as pb
from servinglib.monitoring.metrics import ServingMetrics
from servinglib.serving.service import InferenceService
from servinglib.wire.batch_rows import splits_rows

__all__ = [
    "EXTENSIONS",
    "model_config",
    "model_metadata",
    "model_ready",
    "model_statistics",
    "repository_index",
    "server_metadata",
]

EXTENSIONS = ["model_configuration", "statistics", "model_repository"]


def server_metadata() -> Any:
    """Server name, version and extensions."""
    return pb.ServerMetadataResponse(
        name="servinglib", version=package_version("servinglib"), extensions=EXTENSIONS
    )


def _version(raw: str) -> str | None:
    return raw or None


def model_ready(service: InferenceService, request: Any) -> Any:
    """Whether that version (by default the default version) is READY.

    Raises:
        ModelNotFoundError, VersionNotFoundError: no such model or version.
    """
    view = service.catalog.view(request.name, _version(request.version))
    return pb.ModelReadyResponse(ready=view.ready)


def model_metadata(service: InferenceService, request: Any) -> Any:
    """Name, ready versions, platform and tensor signature of a model."""
    catalog = service.catalog
    instance = catalog.ready(request.name, _version(request.version)).instance
    rows = splits_rows(instance.inputs, catalog.model_config(request.name).batching)
    platform = getattr(instance, "platform", "")
    return pb.ModelMetadataResponse(
        name=request.name,
        versions=[v.version for v in catalog.views(request.name) if v.ready],
        platform=platform if isinstance(platform, str) and platform else "servinglib_python",
        inputs=[tensor_metadata(spec, rows) for spec in instance.inputs],
        outputs=[tensor_metadata(spec, rows) for spec in instance.outputs],
    )


def model_config(service: InferenceService, request: Any) -> Any:
    """Triton's model configuration, the document ``/v2/models/{m}/config`` answers."""
    catalog = service.catalog
    version = _version(request.version)
    config = combiner_config_of(  # an ensemble's combiner step: perf_analyzer reads it too
        request.name, service.models, lambda base: catalog.ready(base, version).instance
    )
    if config is None:
        record = catalog.ready(request.name, version)
        settings = catalog.model_config(request.name)
        config = triton_model_config(  # an ensemble's scheduling included
            request.name,
            record.instance,
            record.instance.inputs,
            record.instance.outputs,
            settings.batching,
            [v.version for v in catalog.views(request.name)],
            catalog.default_version(request.name),
            settings.input_schema,
        )
    message = pb.ModelConfig()
    json_format.ParseDict(config, message, ignore_unknown_fields=True)
    return pb.ModelConfigResponse(config=message)


def repository_index(service: InferenceService, request: Any) -> Any:
    """Every model version with its state and, when not READY, the reason."""
    if request.repository_name:
        raise InvalidInputError(
            f"repository {request.repository_name!r} does not exist; servinglib serves one "
            "repository: leave repository_name empty"
        )
    catalog = service.catalog
    response = pb.RepositoryIndexResponse()
    for name in catalog.model_names():
        for view in catalog.views(name):
            if request.ready and not view.ready:
                continue
            response.models.add(name=name, **view.listing())
    return response


_SECONDS_TO_NS = 1_000_000_000


def model_statistics(service: InferenceService, metrics: ServingMetrics, request: Any) -> Any:
    """Triton's statistics of each (model, version), from the counters of every worker.

    ``success``/``fail``: requests answered or refused, and their wall time (the request
    duration histogram does not split by outcome: both durations are that of all requests,
    shared in proportion of the counts). ``queue``: the batcher's queue count and time (for a
    model without a batcher, its successful requests and what queue time was measured).
    ``inference_count``: successful requests; ``execution_count``: batches run (requests,
    for a model that does not batch).
    ``last_inference`` is not kept (0).

    Raises:
        ModelNotFoundError, VersionNotFoundError: the request names neither.
    """
    catalog = service.catalog
    names = [request.name] if request.name else catalog.model_names()
    wanted: dict[tuple[str, str], None] = {}
    for name in names:
        if request.version:
            catalog.view(name, request.version)  # a 404 for an unknown version
            wanted[(name, request.version)] = None
        else:
            wanted.update(((name, v.version), None) for v in catalog.views(name))
    counts: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for sample, labels, value in metrics.samples(
        "servinglib_requests",
        "servinglib_request_duration_seconds",
        "servinglib_queue_time_seconds",
        "servinglib_batch_size",
    ):
        key = (labels.get("model", ""), labels.get("version", ""))
        if key not in wanted:
            continue
        if sample == "servinglib_requests_total":
            kind = "success" if labels.get("outcome") == "success" else "fail"
            counts[key][kind] += value
        elif sample.endswith(("_sum", "_count")) and not sample.endswith("_bucket"):
            counts[key][sample] += value
    response = pb.ModelStatisticsResponse()
    for name, version in wanted:
        c = counts[(name, version)]
        answered = c["success"] + c["fail"]
        seconds = c["servinglib_request_duration_seconds_sum"]
        success_ns = int(seconds * _SECONDS_TO_NS * c["success"] / answered) if answered else 0
        fail_ns = int(seconds * _SECONDS_TO_NS) - success_ns if answered else 0
        batching = catalog.model_config(name).batching is not None
        success = int(c["success"])
        stats = response.model_stats.add(
            name=name,
            version=version,
            inference_count=success,
            execution_count=int(c["servinglib_batch_size_count"]) if batching else success,
        )
        inference = stats.inference_stats
        inference.success.count, inference.success.ns = success, success_ns
        inference.fail.count, inference.fail.ns = int(c["fail"]), fail_ns
        # perf_analyzer finds the version that served by its queue count
        queued = c["servinglib_queue_time_seconds_count"] if batching else success
        inference.queue.count = int(queued)
        inference.queue.ns = int(c["servinglib_queue_time_seconds_sum"] * _SECONDS_TO_NS)
    return response
