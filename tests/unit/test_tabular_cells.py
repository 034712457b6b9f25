"""CSV text and JSON values become columns of the declared JSON type, cell by cell."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from servinglib.tabular.cells import from_values, parse_text


@pytest.mark.parametrize(
    ("cells", "json_type", "values", "refused"),
    [
        (["1", "2", None], "number", [1, 2, None], {}),  # written as integers: integers
        (["1", "2.5"], "number", [1.0, 2.5], {}),
        (["1", "1e3"], "number", [1.0, 1000.0], {}),
        (["1", "twelve", "3"], "number", [1, None, 3], {1: "'twelve' is not of type 'number'"}),
        (["1.0", "2"], "integer", [1, 2], {}),  # 1.0 is an integer, as in JSON Schema
        (["1.5"], "integer", [None], {0: "1.5 is not of type 'integer'"}),
        (["true", "FALSE", None], "boolean", [True, False, None], {}),
        (["yes"], "boolean", [None], {0: "'yes' is not of type 'boolean'"}),
        (["007", "x"], "string", ["007", "x"], {}),
        (["[1, 2]", "[3"], "array", [[1, 2], None], {1: "'[3' is not of type 'array'"}),
        (["1", "2"], None, [1, 2], {}),  # undeclared: the type every cell fits
        (["1", "x"], None, ["1", "x"], {}),
    ],
)
def test_csv_text_is_read_as_the_declared_type(
    cells: list[str | None], json_type: str | None, values: list[Any], refused: dict[int, str]
) -> None:
    column, bad = parse_text(pa.array(cells, pa.string()), json_type, "f")
    assert column.to_pylist() == values
    assert bad == {row: f"invalid input: features.f: {text}" for row, text in refused.items()}


def test_json_values_of_another_type_fail_their_row_with_the_schema_message() -> None:
    schema = {"type": "number", "minimum": 0}
    column, bad = from_values([1, "two", 2.5, True, 2**64], "number", "f", schema)
    assert column.type == pa.float64()
    assert column.to_pylist() == [1.0, None, 2.5, None, float(2**64)]
    assert bad == {
        1: "invalid input: features.f: 'two' is not of type 'number'",
        3: "invalid input: features.f: True is not of type 'number'",
    }
    column, bad = from_values([1, 2**64], None, "f")  # undeclared: no column holds both
    assert column.to_pylist() == [1, None]
    assert bad == {
        1: f"invalid input: features.f: {2**64} cannot share a column with the other rows' values"
    }
