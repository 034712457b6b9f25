"""``GET /v2/models/{model}/versions/{version}/drift``: drift scores and data quality as JSON."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

from servinglib.http.errors import error_response
from servinglib.monitoring.drift import DriftMonitor
from servinglib.monitoring.metrics import ServingMetrics, multiprocess_dir
from servinglib.registry import ModelRegistry
from servinglib.service import InferenceService

__all__ = ["drift_blueprint", "drift_monitor"]

drift_blueprint = Blueprint("drift", __name__)


def drift_monitor(registry: ModelRegistry, metrics: ServingMetrics) -> DriftMonitor:
    """The process's drift monitor, exporting its scores and quality counters via ``metrics``."""
    monitor = DriftMonitor(registry, multiprocess_dir(), on_issue=metrics.data_quality_issue)
    metrics.add_collector(monitor)
    return monitor


@drift_blueprint.get("/v2/models/<model>/versions/<version>/drift")
def version_drift(model: str, version: str) -> Response:
    """PSI and Jensen-Shannon distance per field over the window, across every worker."""
    service: InferenceService = current_app.extensions["servinglib.service"]
    service.registry.record(model, version)  # 404 for an unknown model or version
    monitor = service.drift
    report = monitor.report(model, version) if isinstance(monitor, DriftMonitor) else None
    if report is None:
        return error_response(
            f"model {model!r} version {version!r} has no reference profile; build one with "
            f"`servinglib profile --model {model} --version {version} --data FILE`",
            404,
        )
    return jsonify(report)
