"""The ``input_schema`` of a tabular model, derived from its features (for servinglib.yaml).

``servinglib init --runtime`` and the examples write it into the config, so ``/infer``
requests are checked (and documented in OpenAPI) by feature name before they are queued.
"""

from __future__ import annotations

from typing import Any

from servinglib.runtimes.tabular._features import FeatureLayout

__all__ = ["input_schema"]


def input_schema(layout: FeatureLayout, max_rows: int = 1024) -> dict[str, Any]:
    """A JSON Schema accepting one row by name, one row as a list, or ``{"rows": [...]}``.

    Example::

        input_schema(model.layout)   # model: a loaded SklearnModel, XGBoostModel, ...
    """
    values = [_value(layout, name) for name in layout.names]
    by_name = {
        "type": "object",
        "required": list(layout.names),
        "additionalProperties": False,
        "properties": dict(zip(layout.names, values, strict=True)),
    }
    as_list = {
        "type": "array",
        "prefixItems": values,
        "minItems": len(values),
        "maxItems": len(values),
    }
    rows = {
        "type": "object",
        "required": ["rows"],
        "additionalProperties": False,
        "properties": {
            "rows": {
                "type": "array",
                "minItems": 1,
                "maxItems": max_rows,
                "items": {"anyOf": [by_name, as_list]},
            }
        },
    }
    return {"anyOf": [by_name, as_list, rows]}


def _value(layout: FeatureLayout, name: str) -> dict[str, Any]:
    if name in layout.categorical:
        return {"type": "string"}
    return {"type": ["number", "null"]} if layout.nullable else {"type": "number"}
