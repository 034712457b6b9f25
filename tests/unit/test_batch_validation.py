"""Columnar input_schema validation gives exactly the verdicts and messages of jsonschema."""

from __future__ import annotations

import math
import random
from typing import Any

import jsonschema
import pyarrow as pa
import pytest

from servinglib.batch._features import FeatureSpec, non_finite_rows, rows_to_features
from servinglib.batch._validation import BatchValidator

SCHEMAS: dict[str, dict[str, Any]] = {
    "vector": {
        "type": "object",
        "required": ["measurements"],
        "additionalProperties": False,
        "properties": {
            "measurements": {
                "type": "array",
                "minItems": 3,
                "maxItems": 3,
                "items": {"type": "number", "minimum": -5, "maximum": 5},
            }
        },
    },
    "image": {
        "type": "object",
        "required": ["pixels"],
        "properties": {
            "pixels": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "array",
                    "minItems": 2,
                    "maxItems": 2,
                    "items": {"type": "number", "minimum": 0, "maximum": 16},
                },
            }
        },
    },
    "mixed": {
        "type": "object",
        "required": ["n", "name"],
        "properties": {
            "n": {"type": "integer", "exclusiveMinimum": 0, "description": "a count"},
            "name": {"type": "string", "minLength": 2, "maxLength": 4},
            "flag": {"type": "boolean"},
        },
    },
    "unsupported": {  # a keyword the columns cannot check: every row goes to jsonschema
        "type": "object",
        "properties": {"n": {"type": "integer", "multipleOf": 3}},
    },
}


def _rows(schema: str, rng: random.Random) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for _ in range(300):
        if schema == "vector":
            size = rng.choice([3, 3, 3, 2, 4])
            rows.append({"measurements": [rng.uniform(-6, 6) for _ in range(size)]})
        elif schema == "image":
            rows.append(
                {
                    "pixels": [
                        [rng.choice([0, 3, 16, 17, -1]) for _ in range(rng.choice([2, 2, 3]))]
                        for _ in range(rng.choice([0, 1, 2]))
                    ]
                }
            )
        elif schema == "mixed":
            rows.append(
                {
                    "n": rng.choice([0, 1, 5, None]),
                    "name": rng.choice(["a", "ab", "abcd", "abcde", "ñé"]),
                    "flag": rng.choice([True, False, None]),
                }
            )
        else:
            rows.append({"n": rng.choice([3, 4, 6, 7])})
    return rows


def _reference(schema: dict[str, Any], features: dict[str, Any]) -> str | None:
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(features)
    )
    if error is None:
        return None
    path = [str(p) for p in error.absolute_path]
    where = "features." + ".".join(path) if path else "features"
    return f"invalid input: {where}: {error.message}"


@pytest.mark.parametrize("numpy_lists", [False, True])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_columnar_verdicts_equal_jsonschema_row_by_row(name: str, numpy_lists: bool) -> None:
    schema = SCHEMAS[name]
    rows = _rows(name, random.Random(name))
    batch = pa.RecordBatch.from_pylist(rows)
    features = rows_to_features(batch, FeatureSpec(numpy_lists=numpy_lists))
    got = BatchValidator(schema).errors(features.features, features.columns, features.errors)
    expected = [_reference(schema, row) for row in rows]  # as JSON requests carry them
    assert got == expected
    assert any(e is None for e in got)
    assert any(e is not None for e in got)


@pytest.mark.parametrize("name", ["image", "mixed", "vector"])
def test_rows_within_every_bound_are_vouched_for_by_the_columns_alone(name: str) -> None:
    schema = SCHEMAS[name]
    rows = [r for r in _rows(name, random.Random(name)) if _reference(schema, r) is None]
    if name == "vector":
        rows.append({"measurements": [5.0, -5.0, 0.0]})  # on the bounds, which are inclusive
    batch = pa.RecordBatch.from_pylist(rows)
    features = rows_to_features(batch, FeatureSpec())
    validator = BatchValidator(schema)
    assert not validator._suspects(features.columns, len(rows)).any()  # no row to jsonschema
    assert validator.errors(features.features, features.columns, features.errors) == [None] * len(
        rows
    )
    if name == "mixed":  # one row on an exclusive bound makes only that row a suspect
        rows.append({"n": 0, "name": "ab", "flag": True})
        batch = pa.RecordBatch.from_pylist(rows)
        features = rows_to_features(batch, FeatureSpec())
        got = validator.errors(features.features, features.columns, features.errors)
        assert got == [None] * (len(rows) - 1) + [_reference(schema, rows[-1])]
        assert got[-1] is not None


def test_nan_and_infinity_are_refused_before_the_schema_like_strict_json() -> None:
    batch = pa.RecordBatch.from_pylist(
        [
            {"v": [1.0, math.nan], "s": {"a": 1.0}},
            {"v": [1.0], "s": {"a": math.inf}},
            {"v": [], "s": {"a": 0.0}},
        ]
    )
    rows = rows_to_features(batch, FeatureSpec())
    assert rows.errors[0] is not None
    assert "features.v holds NaN or Infinity" in rows.errors[0]
    assert rows.errors[1] is not None
    assert "features.s holds NaN or Infinity" in rows.errors[1]
    assert rows.errors[2] is None


@pytest.mark.parametrize(
    ("values", "flagged"),
    [
        ([[1.0, 2.0], [3.0, -4.0]], [False, False]),  # a finite sum clears every row
        ([[1.7e308, 1.7e308], [-1.0, 0.0]], [False, False]),  # the sum overflows: re-checked
        ([[1.0, math.inf], [-math.inf, 0.0]], [True, True]),  # their sum is NaN
        ([[0.0, 0.0], [math.nan, 1.0]], [False, True]),
        ([[1.0, 2.0], []], [False, False]),
    ],
)
def test_non_finite_rows_flags_exactly_the_rows_holding_nan_or_infinity(
    values: list[list[float]], flagged: list[bool]
) -> None:
    array = pa.array(values, pa.list_(pa.float64()))
    assert non_finite_rows(array).tolist() == flagged
    fixed = [v for v in values if len(v) == 2]
    assert non_finite_rows(pa.array(fixed, pa.list_(pa.float64(), 2))).tolist() == [
        f for v, f in zip(values, flagged, strict=True) if len(v) == 2
    ]


def test_a_json_features_column_follows_the_json_parser_rules() -> None:
    batch = pa.RecordBatch.from_pylist(
        [
            {"id": 1, "f": '{"x": 1}'},
            {"id": 2, "f": '{"x": NaN}'},
            {"id": 3, "f": "[" * 5 + "]" * 5},
            {"id": 4, "f": "not json"},
        ]
    )
    rows = rows_to_features(batch, FeatureSpec("id", "f", max_json_depth=4))
    assert len(rows.features) == 4
    assert rows.features[0] == {"x": 1}
    assert rows.errors[0] is None
    assert rows.errors[1] is not None
    assert "NaN" in rows.errors[1]
    assert rows.errors[2] is not None
    assert "deeper than 4" in rows.errors[2]
    assert rows.errors[3] is not None
    assert "not valid JSON" in rows.errors[3]


def test_numpy_lists_are_views_with_the_values_of_the_lists() -> None:
    rows = [{"v": [1.0, 2.0], "m": [[1, 2], [3, 4]], "s": "a"}, {"v": [3.0], "m": [], "s": "b"}]
    schema = pa.schema(
        [
            ("v", pa.list_(pa.float64())),
            ("m", pa.list_(pa.list_(pa.int64(), 2))),
            ("s", pa.string()),
        ]
    )
    batch = pa.RecordBatch.from_pylist(rows, schema)
    features = rows_to_features(batch, FeatureSpec(numpy_lists=True)).features
    assert [list(f) for f in features] == [["v", "m", "s"], ["v", "m", "s"]]
    assert [
        {k: v.tolist() if hasattr(v, "tolist") else v for k, v in f.items()} for f in features
    ] == rows
    assert features[0]["m"].shape == (2, 2)
    assert features[1]["m"].shape == (0, 2)
