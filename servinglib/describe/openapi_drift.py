"""The OpenAPI description of ``GET /v2/models/{model}/versions/{version}/drift``.

The response schema is the JSON the drift monitor reports (a test checks a real report
against it), so clients can generate types for it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DRIFT_PATH", "DRIFT_REPORT_SCHEMA", "drift_operation"]

DRIFT_PATH = "/v2/models/{model}/versions/{version}/drift"

_SCORE = {"type": ["number", "null"], "minimum": 0}
_COUNT = {"type": "integer", "minimum": 0}
_FIELD = {
    "type": "object",
    "required": ["name", "role", "kind", "samples", "psi", "js_distance", "drifted", "quality"],
    "properties": {
        "name": {"type": "string"},
        "role": {"enum": ["feature", "output"]},
        "kind": {"enum": ["numeric", "categorical", "text", "length", "norm", "top_class"]},
        "samples": _COUNT | {"description": "Non-null values binned in the window."},
        "psi": _SCORE | {"description": "Population stability index; null without data."},
        "js_distance": _SCORE | {"maximum": 1, "description": "Jensen-Shannon distance."},
        "drifted": {"type": "boolean", "description": "PSI above drift_threshold."},
        "quality": {
            "type": "object",
            "description": "Data-quality problems in the window.",
            "properties": dict.fromkeys(
                ("missing", "out_of_range", "unseen_category", "wrong_type"), _COUNT
            ),
        },
        "bins": {
            "type": "object",
            "description": "The reference share and the live count of each bin: numbers "
            "below each edge and one past the last, or each category and one for the rest.",
            "properties": {
                "edges": {"type": "array", "items": {"type": "number"}},
                "categories": {"type": "array", "items": {"type": "string"}},
                "reference": {"type": "array", "items": {"type": "number"}},
                "live": {"type": "array", "items": _COUNT},
            },
        },
    },
}

DRIFT_REPORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Drift and data quality of one version over its sliding window, summed "
    "over every worker.",
    "required": ["model", "version", "window", "requests", "workers", "fields"],
    "properties": {
        "model": {"type": "string"},
        "version": {"type": "string"},
        "window": {
            "type": "object",
            "properties": {
                "seconds": {"type": "number"},
                "slots": {"type": "integer"},
                "max_requests": {"type": ["integer", "null"]},
                "slots_used": {"type": "integer"},
            },
        },
        "requests": _COUNT,
        "workers": _COUNT | {"description": "Workers whose counts fall in the window."},
        "unprofiled_requests": _COUNT,
        "drift_threshold": {"type": "number"},
        "fields": {"type": "array", "items": _FIELD},
    },
}


def drift_operation(error: dict[str, Any]) -> dict[str, Any]:
    """The GET operation; ``error`` is the document's error response."""
    return {
        "get": {
            "summary": "Drift scores and data quality of a version",
            "description": "PSI and Jensen-Shannon distance per profiled feature and output "
            "against the version's reference profile (profile.json), over the drift window. "
            "404 when the model or version is unknown or the version has no profile.",
            "responses": {
                "200": {
                    "description": "The drift report",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/DriftReport"}}
                    },
                },
                "404": error,
            },
        }
    }
