"""``GET /v2/models/{model}/versions/{version}/drift``: drift scores and data quality as JSON."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

from servinglib.http.errors import error_body
from servinglib.serving.service import InferenceService

__all__ = ["drift_blueprint"]

drift_blueprint = Blueprint("drift", __name__)


@drift_blueprint.get("/v2/models/<model>/versions/<version>/drift")
def version_drift(model: str, version: str) -> Response:
    """PSI and Jensen-Shannon distance per field over the window, across every worker."""
    service: InferenceService = current_app.extensions["servinglib.serving.service"]
    report = service.drift_report(model, version)  # 404 for an unknown model or version
    if report is None:
        message = (
            f"model {model!r} version {version!r} has no reference profile; build one with "
            f"`servinglib profile --model {model} --version {version} --data FILE`"
        )
        return Response(error_body(message), 404, mimetype="application/json")
    return jsonify(report)
