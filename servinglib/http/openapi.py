"""The OpenAPI 3.1 document of the server, built from the config so it names each model."""

from __future__ import annotations

from importlib.metadata import version as package_version
from typing import Any

from servinglib.config import ServiceConfig
from servinglib.wire.datatypes import DATATYPES

__all__ = ["openapi_document"]

_ERROR = {
    "description": "Error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_EMPTY = {"description": "Status only, empty body"}


_PARAMETERS = {
    "type": "object",
    "description": "Open Inference parameters (e.g. binary_data_size, binary_data, priority).",
    "additionalProperties": {"type": ["string", "number", "boolean"]},
}


def _tensor_schema(with_data: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "name": {"type": "string", "minLength": 1},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "datatype": {"type": "string", "enum": list(DATATYPES)},
        "parameters": _PARAMETERS,
    }
    if with_data:
        # Row-major, flat (nested lists are accepted too); BYTES elements are strings.
        properties["data"] = {"type": "array", "items": {"type": ["number", "string", "boolean"]}}
    return {"type": "object", "required": ["name", "shape", "datatype"], "properties": properties}


def openapi_document(config: ServiceConfig) -> dict[str, Any]:
    """OpenAPI description of every public endpoint, with each model's input schema."""
    names = [m.name for m in config.models]
    per_model = [
        {
            "type": "object",
            "title": m.name,
            "required": ["model_id", "features"],
            "properties": {
                "model_id": {"const": m.name},
                "version": {"type": ["string", "null"]},
                "features": dict(m.input_schema) if m.input_schema else {},
                "priority": {"type": ["integer", "null"], "minimum": 0},
            },
            "additionalProperties": False,
        }
        for m in config.models
    ]
    model_param = {
        "name": "model",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "enum": names},
    }
    version_param = {
        "name": "version",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
    }
    v2_infer = {
        "post": {
            "summary": "Open Inference v2 inference (JSON tensors or binary tensor extension)",
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/V2InferRequest"}},
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                },
            },
            "responses": {
                "200": {
                    "description": "Inference result",
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/V2InferResponse"}
                        },
                        "application/octet-stream": {
                            "schema": {"type": "string", "format": "binary"}
                        },
                    },
                },
                "400": _ERROR,
                "404": _ERROR,
                "413": _ERROR,
                "415": _ERROR,
                "500": _ERROR,
                "503": _ERROR,
            },
        }
    }

    def get(summary: str, ok: dict[str, Any], *errors: str) -> dict[str, Any]:
        responses = {"200": ok} | dict.fromkeys(errors, _ERROR)
        return {"get": {"summary": summary, "responses": responses}}

    json_ok = {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}
    paths: dict[str, Any] = {
        "/infer": {
            "post": {
                "summary": "LyftLearn-style inference",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/InferRequest"}
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "Model output",
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/InferResponse"}
                            }
                        },
                    },
                    "400": _ERROR,
                    "404": _ERROR,
                    "413": _ERROR,
                    "415": _ERROR,
                    "500": _ERROR,
                    "503": _ERROR,
                },
            }
        },
        "/v2": get("Server metadata", json_ok),
        "/v2/health/live": {
            "get": {"summary": "Liveness", "responses": {"200": _EMPTY, "400": _EMPTY}}
        },
        "/v2/health/ready": {
            "get": {"summary": "Readiness", "responses": {"200": _EMPTY, "400": _EMPTY}}
        },
        "/v2/models/{model}": get("Model metadata", json_ok, "404", "503")
        | {"parameters": [model_param]},
        "/v2/models/{model}/versions/{version}": get(
            "Model version metadata", json_ok, "404", "503"
        )
        | {"parameters": [model_param, version_param]},
        "/v2/models/{model}/ready": {
            "parameters": [model_param],
            "get": {
                "summary": "Model readiness",
                "responses": {"200": _EMPTY, "400": _EMPTY, "404": _ERROR},
            },
        },
        "/v2/models/{model}/versions/{version}/ready": {
            "parameters": [model_param, version_param],
            "get": {
                "summary": "Model version readiness",
                "responses": {"200": _EMPTY, "400": _EMPTY, "404": _ERROR},
            },
        },
        "/v2/models/{model}/config": get("Triton model configuration", json_ok, "404", "503")
        | {"parameters": [model_param]},
        "/v2/models/{model}/versions/{version}/config": get(
            "Triton model configuration", json_ok, "404", "503"
        )
        | {"parameters": [model_param, version_param]},
        "/v2/models/{model}/infer": v2_infer | {"parameters": [model_param]},
        "/v2/models/{model}/versions/{version}/infer": v2_infer
        | {"parameters": [model_param, version_param]},
        "/v2/repository/index": {
            "post": {
                "summary": "Model versions and their states",
                "requestBody": {
                    "required": False,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {"ready": {"type": "boolean"}},
                            }
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "Every version and its state",
                        "content": {
                            "application/json": {
                                "schema": {"type": "array", "items": {"type": "object"}}
                            }
                        },
                    },
                    "400": _ERROR,
                },
            }
        },
        "/models": get("Models, versions, states and failure reasons", json_ok),
        "/livez": get("Kubernetes liveness", json_ok, "503"),
        "/readyz": get("Kubernetes readiness", json_ok, "503"),
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "responses": {
                    "200": {
                        "description": "Prometheus text format",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/openapi.json": get("This document", json_ok),
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"{config.service} (servinglib)",
            "version": package_version("servinglib"),
        },
        "paths": paths,
        "components": {
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {"error": {"type": "string"}},
                },
                "InferRequest": {"oneOf": per_model},
                "InferResponse": {
                    "type": "object",
                    "required": ["model_id", "version", "output", "request_id"],
                    "properties": {
                        "model_id": {"type": "string"},
                        "version": {"type": "string"},
                        "output": {},
                        "request_id": {"type": "string"},
                    },
                },
                "V2InferRequest": {
                    "type": "object",
                    "required": ["inputs"],
                    "properties": {
                        "id": {"type": "string"},
                        "parameters": _PARAMETERS,
                        "inputs": {"type": "array", "minItems": 1, "items": _tensor_schema(True)},
                        "outputs": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "parameters": _PARAMETERS,
                                },
                            },
                        },
                    },
                },
                "V2InferResponse": {
                    "type": "object",
                    "required": ["model_name", "outputs"],
                    "properties": {
                        "model_name": {"type": "string"},
                        "model_version": {"type": "string"},
                        "id": {"type": "string"},
                        "outputs": {"type": "array", "items": _tensor_schema(True)},
                    },
                },
            }
        },
    }
