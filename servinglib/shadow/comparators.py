"""How a shadow's answer is compared with the primary's: numeric, exact, cosine, top-1, custom."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servinglib.config.spec import ComparatorConfig
from servinglib.errors import ConfigError, ServinglibError
from servinglib.lifecycle.importing import import_object
from servinglib.lifecycle.selftest import compare_outputs, to_plain
from servinglib.model import Tolerance

__all__ = ["Comparator", "Comparison", "make_comparator"]


@dataclass(frozen=True)
class Comparison:
    """Whether a shadow agreed with the primary, and by how much they differ (if numeric)."""

    agree: bool
    difference: float | None = None


Comparator = Callable[[Any, Any], Comparison]


def _numbers(value: Any) -> list[float]:
    """Every number in a plain JSON-like value, depth first."""
    if isinstance(value, bool):
        return [float(value)]
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, Mapping):
        return [n for key in value for n in _numbers(value[key])]
    if isinstance(value, list):
        return [n for item in value for n in _numbers(item)]
    return []


def _as_floats(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {k: _as_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_floats(v) for v in value]
    return value


def _pick(value: Any, field: str | None) -> Any:
    plain = to_plain(value)
    if field is not None and isinstance(plain, dict):
        return plain.get(field)
    return plain


def _numeric(config: ComparatorConfig) -> Comparator:
    tolerance = Tolerance(atol=config.atol, rtol=config.rtol)

    def compare(primary: Any, shadow: Any) -> Comparison:
        # Numbers are numbers here: 1 and 1.0 agree (self-tests, by contrast, check types).
        expected, actual = (
            _as_floats(_pick(primary, config.field)),
            _as_floats(_pick(shadow, config.field)),
        )
        agree = not compare_outputs(expected, actual, tolerance)
        a, b = _numbers(expected), _numbers(actual)
        difference = (
            max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)
            if len(a) == len(b)
            else None
        )
        return Comparison(agree, difference)

    return compare


def _exact(config: ComparatorConfig) -> Comparator:
    def compare(primary: Any, shadow: Any) -> Comparison:
        return Comparison(_pick(primary, config.field) == _pick(shadow, config.field))

    return compare


def _cosine(config: ComparatorConfig) -> Comparator:
    def compare(primary: Any, shadow: Any) -> Comparison:
        a, b = _numbers(_pick(primary, config.field)), _numbers(_pick(shadow, config.field))
        if len(a) != len(b) or not a:
            return Comparison(False, None)
        norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
        similarity = sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else float(a == b)
        return Comparison(similarity >= config.min_similarity, 1.0 - similarity)

    return compare


def _top1(config: ComparatorConfig) -> Comparator:
    def label(value: Any) -> Any:
        picked = _pick(value, config.field)
        if isinstance(picked, str):
            return picked
        numbers = _numbers(picked)
        return max(range(len(numbers)), key=numbers.__getitem__) if numbers else None

    def compare(primary: Any, shadow: Any) -> Comparison:
        return Comparison(label(primary) == label(shadow))

    return compare


def make_comparator(
    config: ComparatorConfig, root: Path, python_path: Sequence[Path] = ()
) -> Comparator:
    """Build the comparator a shadow's ``comparator:`` entry describes.

    Raises:
        ConfigError: a custom comparator function cannot be imported.
    """
    if config.kind == "custom":
        assert config.function is not None
        try:
            function = import_object(config.function, root, python_path)
        except ServinglibError as e:
            raise ConfigError(f"custom comparator {config.function!r}: {e}") from e
        if not callable(function):
            raise ConfigError(f"custom comparator {config.function!r} is not callable")

        def custom(primary: Any, shadow: Any) -> Comparison:
            result = function(to_plain(primary), to_plain(shadow))
            if isinstance(result, tuple):
                return Comparison(bool(result[0]), float(result[1]))
            return Comparison(bool(result))

        return custom
    builders = {"numeric": _numeric, "exact": _exact, "cosine": _cosine, "top1": _top1}
    return builders[config.kind](config)
