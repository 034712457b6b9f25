"""The OpenAPI infer operations of a model that declares its inputs are exact: the server
accepts what their schema allows and refuses what it refuses (schemathesis checks the
first half at scale in tests/integration/test_openapi_fuzzing.py)."""

from __future__ import annotations

from typing import Any

import jsonschema
import numpy as np
import pytest
from flask.testing import FlaskClient

from servinglib.describe.openapi_tensors import declared_inputs, element_schema
from servinglib.errors import InvalidInputError
from servinglib.model import TensorSpec
from servinglib.serve.app import create_app_from_config
from servinglib.wire.tensor_bounds import (
    check_bounds,
    check_dimensions,
    dimension_bounds,
    element_bounds,
)
from tests.integration.test_openapi_fuzzing import fuzz_service


@pytest.fixture(scope="module")
def declared(tmp_path_factory: pytest.TempPathFactory) -> FlaskClient:
    """The fixture service whose scorer declares ``x``: FP64, shape [1]."""
    return create_app_from_config(fuzz_service(tmp_path_factory.mktemp("svc"))).test_client()


def request_schema(client: FlaskClient, path: str) -> dict[str, Any]:
    document = client.get("/openapi.json").get_json()
    operation = document["paths"][path]["post"]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    return schema | {"components": document["components"]}


def test_declared_inputs_get_their_own_operations_the_rest_share_one(
    declared: FlaskClient,
) -> None:
    paths = declared.get("/openapi.json").get_json()["paths"]
    assert "/v2/models/scorer/infer" in paths
    assert "/v2/models/scorer/versions/{version}/infer" in paths
    versioned = paths["/v2/models/scorer/versions/{version}/infer"]["post"]
    assert "parameters" in paths["/v2/models/scorer/versions/{version}/infer"]
    assert "Inference-Header-Content-Length" in versioned["description"]
    model = paths["/v2/models/{model}/infer"]["parameters"][0]["schema"]["enum"]
    assert "scorer" not in model
    assert "echo" in model


def test_what_the_schema_allows_and_refuses_matches_the_server(declared: FlaskClient) -> None:
    schema = request_schema(declared, "/v2/models/scorer/infer")
    good = {"inputs": [{"name": "x", "shape": [], "datatype": "FP64", "data": [2.5]}]}
    jsonschema.validate(good, schema)
    assert declared.post("/v2/models/scorer/infer", json=good).status_code == 200
    wrong = [
        {"name": "x", "shape": [2], "datatype": "FP64", "data": [2.5]},  # data != shape
        {"name": "x", "shape": [], "datatype": "INT64", "data": [2]},  # no silent cast
        {"name": "x", "shape": [], "datatype": "FP64", "data": [1e301]},  # input_schema bound
        {"name": "x", "shape": [], "datatype": "FP64", "data": 2.5},  # data is a list
        {"name": "x", "shape": [], "datatype": "FP64", "data": [1.0], "parameters": {"k": [1]}},
        {"name": "y", "shape": [], "datatype": "FP64", "data": [2.5]},
        {
            "name": "x",
            "shape": [],
            "datatype": "FP64",
            "data": [2.5],
            "parameters": {"binary_data_size": 8},
        },
    ]
    for tensor in wrong:
        body = {"inputs": [tensor]}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(body, schema)
        response = declared.post("/v2/models/scorer/infer", json=body)
        assert response.status_code == 400, (tensor, response.get_json())


@pytest.mark.parametrize(
    ("datatype", "inside", "outside"),
    [("FP32", 3.0e38, 3.5e38), ("FP16", 65519, 65520), ("UINT8", 255, 256), ("INT8", -128, -129)],
)
def test_element_bounds_follow_the_datatype(datatype: str, inside: float, outside: float) -> None:
    jsonschema.validate(inside, element_schema(datatype))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(outside, element_schema(datatype))


def test_one_free_dimension_lists_sizes_several_are_left_generic() -> None:
    listed = declared_inputs([TensorSpec("p", "FP32", (-1, 3))], listed_sizes=2)
    assert listed is not None
    variants = listed["items"]["oneOf"]
    assert [v["properties"]["data"]["maxItems"] for v in variants] == [3, 6]
    assert declared_inputs([TensorSpec("p", "FP32", (-1, -1))], listed_sizes=2) is None
    assert declared_inputs([], listed_sizes=2) is None
    # an input schema that allows one row pins the first -1: one free dimension is left
    one_row = {
        "properties": {
            "ids": {
                "type": "array",
                "minItems": 1,
                "maxItems": 1,
                "items": {"type": "array", "items": {"type": "integer"}},
            }
        }
    }
    ids = [TensorSpec("ids", "INT64", (-1, -1))]
    listed = declared_inputs(ids, listed_sizes=2, input_schema=one_row)
    assert listed is not None
    shapes = [v["properties"]["shape"]["const"] for v in listed["items"]["oneOf"]]
    assert shapes == [[1, 1], [1, 2]]


def test_input_schema_bounds_reach_the_tensor_of_the_same_name() -> None:
    schema = {
        "properties": {
            "m": {"type": "array", "items": {"type": "number", "minimum": -1, "maximum": 1}},
            "text": {"type": "string", "maxLength": 3},
        }
    }
    assert element_bounds(schema, "m") == {"minimum": -1, "maximum": 1}
    assert element_bounds(schema, "other") == {}
    assert element_bounds(None, "m") == {}
    check_bounds(np.array([-1.0, 1.0]), element_bounds(schema, "m"), "m")
    with pytest.raises(InvalidInputError, match="above its maximum 1"):
        check_bounds(np.array([0.5, 2.0]), element_bounds(schema, "m"), "m")
    text = np.array(["abé".encode(), b"abcd"], dtype=object)
    with pytest.raises(InvalidInputError, match="longer than 3 characters"):
        check_bounds(text, element_bounds(schema, "text"), "text")
    check_bounds(text[:1], element_bounds(schema, "text"), "text")  # 3 characters, 4 bytes
    listed = declared_inputs([TensorSpec("text", "BYTES", (1,))], 1, schema)
    assert listed is not None
    assert listed["items"]["properties"]["data"]["items"]["maxLength"] == 3


def test_input_schema_array_sizes_bound_the_tensor_axes_innermost_last() -> None:
    ids = {"type": "integer"}
    schema = {
        "properties": {
            "ids": {"minItems": 1, "items": {"minItems": 1, "maxItems": 4, "items": ids}},
            "row": {"minItems": 3, "maxItems": 3, "items": {"type": "number"}},
            "text": {"type": "string"},
        }
    }
    assert dimension_bounds(schema, "ids") == ((1, None), (1, 4))
    assert dimension_bounds(schema, "row") == ((3, 3),)
    assert dimension_bounds(schema, "text") == ()
    assert dimension_bounds(None, "ids") == ()
    check_dimensions((2, 4), dimension_bounds(schema, "ids"), "ids")
    for shape, axis in [((1, 5), 1), ((1, 0), 1), ((0, 2), 0)]:
        with pytest.raises(InvalidInputError, match=f"on axis {axis}; its input_schema allows"):
            check_dimensions(shape, dimension_bounds(schema, "ids"), "ids")
    check_dimensions((1, 3), dimension_bounds(schema, "row"), "row")  # [3 numbers] as [1, 3]
    with pytest.raises(InvalidInputError, match="size 4 on axis 1"):
        check_dimensions((1, 4), dimension_bounds(schema, "row"), "row")
    # The document lists only the sizes the schema allows, so a schema-valid tensor is served.
    listed = declared_inputs([TensorSpec("ids", "INT64", (1, -1))], 8, schema)
    assert listed is not None
    shapes = [v["properties"]["shape"]["const"] for v in listed["items"]["oneOf"]]
    assert shapes == [[1, 1], [1, 2], [1, 3], [1, 4]]
    assert declared_inputs([TensorSpec("row", "FP32", (1, 4))], 8, schema) is None
    two = declared_inputs([TensorSpec("a", "FP32", (1,)), TensorSpec("b", "INT8", (2,))], 1)
    assert two is not None
    body = [
        {"name": "b", "shape": [2], "datatype": "INT8", "data": [1, 2]},
        {"name": "a", "shape": [1], "datatype": "FP32", "data": [0.5]},
    ]
    jsonschema.validate(body, two)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([body[0], body[0]], two)


@pytest.mark.parametrize("datatype", ["FP32", "FP16"])
@pytest.mark.parametrize("bound", [16.0, 0.1, 1e6, None])
def test_float_bounds_are_what_decodes_within_them(datatype: str, bound: float | None) -> None:
    """16.000000000000004 sent as FP32 decodes to 16: the schema allows exactly the numbers
    whose decoded value is within the bound."""
    dtype = np.dtype(np.float32 if datatype == "FP32" else np.float16)
    high = float(np.finfo(dtype).max) if bound is None else bound
    if dtype == np.float16 and high > 65504:
        return
    schema = element_schema(datatype, -high, high)
    top = schema["maximum"]
    with np.errstate(over="ignore"):
        assert float(dtype.type(top)) <= high
        assert not float(dtype.type(np.nextafter(top, np.inf))) <= high
        assert float(dtype.type(schema["minimum"])) >= -high


def test_the_document_and_the_server_agree_on_the_request_id(declared: FlaskClient) -> None:
    """An empty id is no id (perf_analyzer sends it); a control character is refused."""
    schema = declared.get("/openapi.json").get_json()["components"]["schemas"]["V2InferRequest"]
    ids = schema["properties"]["id"]
    for value, accepted in (("", True), (None, True), ("req-1", True), ("a\nb", False)):
        try:
            jsonschema.validate(value, ids)
            valid = True
        except jsonschema.ValidationError:
            valid = False
        assert valid is accepted, value
    tensor = {"name": "x", "shape": [], "datatype": "FP64", "data": [1.0]}
    for value, status in (("", 200), ("a\nb", 400)):
        answer = declared.post("/v2/models/scorer/infer", json={"id": value, "inputs": [tensor]})
        assert answer.status_code == status, answer.get_data(as_text=True)
