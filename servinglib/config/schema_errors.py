"""Turn JSON Schema violations into errors that name the file, the key path and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import jsonschema

from servinglib.errors import ConfigError

__all__ = ["explain_schema_error", "validate_against_schema"]


def validate_against_schema(document: Any, schema: Mapping[str, Any], label: str) -> None:
    """Raise one :class:`ConfigError` listing every schema violation of ``document``."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(document), key=lambda err: list(err.absolute_path))
    if not errors:
        return
    lines = [f"{_key_path(err.absolute_path) or '<top level>'}: {_explain(err)}" for err in errors]
    if len(lines) == 1:
        raise ConfigError(
            _explain(errors[0]), source=label, key_path=_key_path(errors[0].absolute_path)
        )
    raise ConfigError(f"{len(lines)} problems:\n  " + "\n  ".join(lines), source=label)


def _key_path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _reference_hint(value: str, pattern: str) -> str:
    """``model.py.EtaModel`` -> did you mean ``model.py:EtaModel``?"""
    text = (
        f"{value!r} does not match {pattern}; use `path/file.py:Class` or "
        "`package.module:Class` (a colon before the class name)"
    )
    head, dot, tail = value.rpartition(".")
    if dot and ":" not in value and tail.isidentifier():
        text += f"; did you mean {head + ':' + tail!r}?"
    return text


def explain_schema_error(err: jsonschema.ValidationError) -> str:
    """A sentence that says how to fix one JSON Schema violation (did-you-mean for keys)."""
    return _explain(err)


def _explain(err: jsonschema.ValidationError) -> str:
    """Turn a jsonschema error into a sentence that says how to fix it."""
    schema = err.schema if isinstance(err.schema, dict) else {}
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = sorted(schema.get("properties", {}))
        unknown = sorted(set(err.instance) - set(allowed))
        hints = []
        removed = schema.get("x-removed", {})  # keys of earlier releases: why and what now
        for key in unknown:
            if key in removed:
                hints.append(f"{key!r} is no longer supported: {removed[key]}; remove it")
                continue
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hints.append(
                f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
            )
        return "; ".join(hints) + f"; allowed keys: {', '.join(allowed)}"
    if err.validator == "oneOf" and isinstance(err.instance, dict):
        both = "class" in err.instance and "runtime" in err.instance
        return "set either `class` (your Model subclass) or `runtime` (onnx or torch), " + (
            "not both" if both else "one of them is required"
        )
    if err.validator == "required":
        return f"{err.message}; add it"
    if err.validator == "pattern":
        if ":" in str(err.validator_value):  # a reference: module:Class or file.py:Class
            return _reference_hint(str(err.instance), str(err.validator_value))
        return (
            f"{err.instance!r} is not allowed here; use lower-case letters, digits, '.', '_' "
            f"and '-' (pattern {err.validator_value})"
        )
    if err.validator == "maximum":  # a value that sizes memory or disk: say what it sizes
        why = schema.get("x-limit")
        return (
            f"{err.instance!r} is above the limit {err.validator_value}"
            + (f" ({why})" if why else "")
            + f"; set it to at most {err.validator_value}"
        )
    if err.validator == "enum":
        return f"{err.instance!r} is not one of {err.validator_value}"
    if err.validator == "type":
        return f"expected {err.validator_value}, got {err.instance!r}"
    description = schema.get("description")
    return f"{err.message}" + (f" ({description})" if description else "")
