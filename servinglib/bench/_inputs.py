"""What the load sends: a version's self-test inputs, a file's, or ones made from the input
schema; and the input datatypes the server declares for the model."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servinglib.config.spec import ModelConfig, load_config
from servinglib.errors import ConfigError
from servinglib.lifecycle.selftest import TEST_DATA_FILE, load_test_data

__all__ = ["declared_datatypes", "inputs_from_cases", "inputs_from_file", "inputs_from_schema"]


def _entry(config_path: str | Path, model: str) -> ModelConfig:
    config = load_config(config_path)
    entry = next((m for m in config.models if m.name == model), None)
    if entry is None:
        raise ConfigError(
            f"no model {model!r} in {config_path}; models: {[m.name for m in config.models]}"
        )
    return entry


def inputs_from_cases(
    config_path: str | Path, model: str, version: str | None
) -> list[dict[str, Any]]:
    """The named inputs of each self-test case of the version (default: the default)."""
    entry = _entry(config_path, model)
    path = entry.repository / (version or entry.default_version)
    cases = [c.input for c in load_test_data(path) if isinstance(c.input, Mapping) and c.input]
    if not cases:
        raise ConfigError(
            f"model {model!r}: no self-test cases of named inputs in {path / TEST_DATA_FILE}; "
            "pass --inputs FILE or --inputs schema"
        )
    return [dict(c) for c in cases]


def inputs_from_file(path: Path) -> list[dict[str, Any]]:
    """A JSON list of input objects, or ``{"cases": [{"input": ...}]}`` (test_data.json)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"--inputs {path}: {e}; pass a JSON file of input objects") from e
    items = document.get("cases", []) if isinstance(document, dict) else document
    found = [i.get("input", i) if isinstance(i, dict) and "input" in i else i for i in items]
    if not found or not all(isinstance(i, dict) for i in found):
        raise ConfigError(
            f"--inputs {path}: expected a list of objects (input name -> value) or "
            '{"cases": [{"input": {...}}]}'
        )
    return found


def inputs_from_schema(config_path: str | Path, model: str, count: int = 8) -> list[dict[str, Any]]:
    """``count`` inputs made from the model's ``input_schema`` (within its bounds)."""
    schema = _entry(config_path, model).input_schema
    if not schema:
        raise ConfigError(f"model {model!r} has no input_schema; pass --inputs cases or FILE")
    generator = random.Random(0)  # noqa: S311 (test inputs, not secrets)
    return [_value(schema, generator) for _ in range(count)]


def _value(schema: Mapping[str, Any], rng: random.Random) -> Any:
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        props = schema.get("properties", {})
        return {k: _value(v, rng) for k, v in props.items() if k in schema.get("required", props)}
    if kind == "array":
        size = max(1, int(schema.get("minItems", 1)))
        return [_value(schema.get("items", {"type": "number"}), rng) for _ in range(size)]
    if kind in ("number", "integer"):
        low = float(schema.get("minimum", 0.0))
        high = float(schema.get("maximum", low + 1.0))
        value = rng.uniform(low, min(high, low + 1e3))
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return True
    return "benchmark input text"[: int(schema.get("maxLength", 20))]


def declared_datatypes(url: str, model: str, version: str | None) -> dict[str, str]:
    """Input name -> Open Inference datatype from the server's model metadata (empty when
    the server does not say)."""
    path = f"{url}/v2/models/{model}" + (f"/versions/{version}" if version else "")
    try:
        with urllib.request.urlopen(path, timeout=10) as answer:  # noqa: S310 (http checked)
            metadata = json.load(answer)
    except (urllib.error.URLError, ValueError):
        return {}
    return {i["name"]: i["datatype"] for i in metadata.get("inputs", []) if "name" in i}
