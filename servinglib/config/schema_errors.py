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


def _explain_one_of(err: jsonschema.ValidationError) -> str:
    """A mapping matching no (or several) ``oneOf`` branches: the model's ``class`` or
    ``runtime``, or the branch its discriminating key (e.g. a sink's ``type``) names."""
    instance: dict[str, Any] = err.instance if isinstance(err.instance, dict) else {}
    alternatives = err.validator_value if isinstance(err.validator_value, list) else []
    branches = [b for b in alternatives if isinstance(b, dict)]
    if any(b.get("required") == ["class"] for b in branches):  # a model's implementation
        both = "class" in instance and "runtime" in instance
        return "set either `class` (your Model subclass) or `runtime` (onnx or torch), " + (
            "not both" if both else "one of them is required"
        )
    for key in ("type", "kind"):
        kinds = [b.get("properties", {}).get(key, {}).get("const") for b in branches]
        if None in kinds or not kinds:
            continue
        if instance.get(key) not in kinds:
            return f"set `{key}` to one of {kinds}, got {instance.get(key)!r}"
        index = kinds.index(instance[key])
        inner = [e for e in err.context or () if e.schema_path and e.schema_path[0] == index]
        if inner:
            best = min(inner, key=lambda e: len(e.relative_path))
            where = _key_path(best.relative_path)
            return (f"`{where}`: " if where else "") + _explain(best)
    best_match = jsonschema.exceptions.best_match(err.context or ())
    return _explain(best_match) if best_match is not None else err.message


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
        return _explain_one_of(err)
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
    if err.validator == "minimum":
        return (
            f"{err.instance!r} is below the minimum {err.validator_value}"
            + (f" ({schema['description'].rstrip('.')})" if "description" in schema else "")
            + f"; set it to at least {err.validator_value}"
        )
    if err.validator == "enum":
        allowed = list(err.validator_value) if isinstance(err.validator_value, list) else []
        close = difflib.get_close_matches(str(err.instance), [str(a) for a in allowed], n=1)
        return f"{err.instance!r} is not one of {allowed}" + (
            f" (did you mean {close[0]!r}?)" if close else ""
        )
    if err.validator == "type":
        return f"expected {err.validator_value}, got {err.instance!r}"
    description = schema.get("description")
    return f"{err.message}" + (f" ({description})" if description else "")
