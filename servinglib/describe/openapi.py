"""The OpenAPI 3.1 document of the server, built from the config so it names each model."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import version as package_version
from typing import Any

from servinglib.config.spec import ServiceConfig
from servinglib.describe.openapi_drift import DRIFT_PATH, DRIFT_REPORT_SCHEMA, drift_operation
from servinglib.describe.openapi_tensors import PARAMETERS, declared_inputs, declared_outputs
from servinglib.model import Model
from servinglib.wire.datatypes import DATATYPES
from servinglib.wire.tensor_checks import MAX_DIMENSIONS
from servinglib.wire.v2 import MAX_ID_LENGTH

__all__ = ["openapi_document"]

_ERROR = {
    "description": "Error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_EMPTY = {"description": "Status only, empty body"}


def _flag(name: str) -> dict[str, Any]:
    """A ``{"<name>": bool}`` body, as KServe's SDK reads the health endpoints."""
    flag = {
        "type": "object",
        "required": [name],
        "properties": {name: {"type": "boolean"}},
        "additionalProperties": False,
    }
    return {
        "description": f"{name}: true or false",
        "content": {"application/json": {"schema": flag}},
    }


_PARAMETERS = PARAMETERS
_REQUEST_PARAMETERS = PARAMETERS | {
    "properties": {"priority": {"type": "integer", "minimum": 0, "description": "0 first"}}
}
# Sizes listed for an input's -1 dimension (JSON Schema cannot tie data's length to shape).
LISTED_SIZES = 4


_BINARY = (
    "Binary tensor extension: send the header Inference-Header-Content-Length with the "
    "length of a JSON header (this request object) at the start of the body; the raw tensor "
    "bytes follow it, in the order of the inputs whose parameters.binary_data_size is set. "
    "Without that header the body is JSON, whatever its Content-Type. Generated requests "
    "cannot tie the header to the body, so the binary form is described here only."
)
_ANSWER_HEADER = {
    "Inference-Header-Content-Length": {
        "description": "Set when an output is binary: the length of the JSON header.",
        "schema": {"type": "integer", "minimum": 0},
    }
}


def _tensor_schema(max_elements: int, request: bool) -> dict[str, Any]:
    """A tensor; in a JSON request body its ``data`` is required (binary data needs the
    binary extension's header and body)."""
    properties: dict[str, Any] = {
        "name": {"type": "string", "minLength": 1},
        "shape": {
            "type": "array",
            "maxItems": MAX_DIMENSIONS,
            "items": {"type": "integer", "minimum": 0, "maximum": max_elements},
        },
        "datatype": {"type": "string", "enum": list(DATATYPES)},
        "parameters": _PARAMETERS,
        # Row-major, flat (nested lists are accepted too); BYTES elements are strings.
        "data": {"type": "array", "items": {"type": ["number", "string", "boolean"]}},
    }
    required = ["name", "shape", "datatype", "data"] if request else ["name", "shape", "datatype"]
    return {"type": "object", "required": required, "properties": properties}


def _v2_infer_paths(
    config: ServiceConfig,
    declared: Mapping[str, Mapping[str, Model]],
    operation: Any,
    model_param: dict[str, Any],
) -> dict[str, Any]:
    """One pair of infer paths per model whose ready versions declare the same inputs (the
    request schema is then exact); one templated pair for the other models."""
    paths: dict[str, Any] = {}
    generic = []
    for m in config.models:
        versions = declared.get(m.name, {})
        specs = {(tuple(i.inputs), tuple(i.outputs)) for i in versions.values()}
        inputs = (
            declared_inputs(next(iter(specs))[0], LISTED_SIZES, m.input_schema)
            if len(specs) == 1
            else None
        )
        if inputs is None:
            generic.append(m.name)
            continue
        exact: dict[str, Any] = {"inputs": inputs}
        outputs = next(iter(specs))[1]
        if outputs:  # a request may name only those
            exact["outputs"] = declared_outputs(outputs)
        request = {"$ref": "#/components/schemas/V2InferRequest"}
        op = operation({"allOf": [request, {"properties": exact}]})
        version = {
            "name": "version",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "enum": sorted(versions)},
        }
        paths[f"/v2/models/{m.name}/infer"] = op
        paths[f"/v2/models/{m.name}/versions/{{version}}/infer"] = op | {"parameters": [version]}
    if generic:
        op = operation({"$ref": "#/components/schemas/V2InferRequest"})
        model = model_param | {"schema": {"type": "string", "enum": generic}}
        version = {"name": "version", "in": "path", "required": True, "schema": {"type": "string"}}
        paths["/v2/models/{model}/infer"] = op | {"parameters": [model]}
        paths["/v2/models/{model}/versions/{version}/infer"] = op | {"parameters": [model, version]}
    return paths


def openapi_document(
    config: ServiceConfig,
    declared: Mapping[str, Mapping[str, Model]] | None = None,
) -> dict[str, Any]:
    """OpenAPI description of every public endpoint, with each model's input schema.

    ``declared`` maps each model to its ready versions' instances; a model whose versions
    declare the same inputs gets infer operations whose request schema is exact.
    """
    names = [m.name for m in config.models]
    max_elements = config.server.max_tensor_elements
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

    def v2_infer(request: dict[str, Any]) -> dict[str, Any]:
        return {
            "post": {
                "summary": "Open Inference v2 inference",
                "description": _BINARY,
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": request}},
                },
                "responses": {
                    "200": {
                        "description": "Inference result",
                        "headers": _ANSWER_HEADER,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/V2InferResponse"}
                            },
                            "application/octet-stream": {
                                "schema": {"type": "string", "format": "binary"}
                            },
                        },
                    },
                }
                | dict.fromkeys(("400", "404", "413", "415", "500", "501", "503", "504"), _ERROR),
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
                    "501": _ERROR,
                    "503": _ERROR,
                    "504": _ERROR,
                },
            }
        },
        "/v2": get("Server metadata", json_ok),
        "/v2/health/live": {
            "get": {
                "summary": "Liveness",
                "responses": {"200": _flag("live"), "400": _flag("live")},
            }
        },
        "/v2/health/ready": {
            "get": {
                "summary": "Readiness",
                "responses": {"200": _flag("ready"), "400": _flag("ready")},
            }
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
        DRIFT_PATH: drift_operation(_ERROR) | {"parameters": [model_param, version_param]},
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
    paths |= _v2_infer_paths(config, declared or {}, v2_infer, model_param)
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
                "DriftReport": DRIFT_REPORT_SCHEMA,
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
                        "id": {
                            # null and "" (what perf_analyzer sends) are read as no id
                            "type": ["string", "null"],
                            "maxLength": MAX_ID_LENGTH,
                            "pattern": "^[ -~]*$",
                        },
                        "parameters": _REQUEST_PARAMETERS,
                        "inputs": {
                            "type": "array",
                            "minItems": 1,
                            "items": _tensor_schema(max_elements, request=True),
                        },
                        "outputs": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    # the classification extension is a 400
                                    "parameters": _PARAMETERS
                                    | {"properties": {"classification": False}},
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
                        "outputs": {
                            "type": "array",
                            "items": _tensor_schema(max_elements, request=False),
                        },
                    },
                },
            }
        },
    }
