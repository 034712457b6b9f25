"""Strict JSON parsing for request bodies: UTF-8 only, no NaN/Infinity, no lone
surrogates, numbers within a 64-bit float, bounded nesting."""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn

import orjson

from servinglib.errors import InvalidInputError

__all__ = ["parse_json"]


def _refuse_constant(name: str) -> Any:
    raise InvalidInputError(
        f"request body contains {name}, which is not JSON; send a number or null"
    )


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise InvalidInputError(
            f"number {text[:40]!r} overflows a 64-bit float; send a smaller one"
        )
    return value


def parse_json(raw: bytes | str, max_depth: int) -> Any:
    """Parse ``raw`` as strict JSON and refuse documents nested deeper than ``max_depth``.

    Raises:
        InvalidInputError: not JSON, not UTF-8, NaN/Infinity literals, or nesting too deep.
    """
    try:
        # orjson (C) accepts exactly strict JSON and refuses NaN, Infinity and overflowing
        # numbers; whatever it refuses is parsed again below, only to say what was wrong.
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        _refuse(raw, max_depth, e)
    if isinstance(raw, bytes):
        brackets = raw.count(b"[") + raw.count(b"{")
    else:
        brackets = raw.count("[") + raw.count("{")
    if brackets > max_depth:  # fewer brackets in all cannot nest deeper
        _check_depth(document, max_depth)
    return document


def _refuse(raw: bytes | str, max_depth: int, error: orjson.JSONDecodeError) -> NoReturn:
    """Explain why orjson refused ``raw``: the standard library's parse says it precisely.

    What the standard library accepts but orjson refuses is refused too: lone surrogates
    (``"\\ud800"``), encoded surrogates and other invalid UTF-8, UTF-16 bodies, integers
    too large for a 64-bit float.
    """
    try:
        json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InvalidInputError(f"request body is not valid JSON: {e}") from e
    except ValueError as e:  # e.g. an integer with more digits than Python converts
        raise InvalidInputError(f"request body holds a number servinglib refuses: {e}") from e
    except RecursionError:
        raise InvalidInputError(
            f"request body nests deeper than {max_depth} levels; flatten it"
        ) from None
    raise InvalidInputError(
        f"request body is not strict UTF-8 JSON: {error}; send UTF-8 without lone surrogates "
        "and numbers a 64-bit float holds"
    ) from None


def _check_depth(document: Any, max_depth: int) -> None:
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > max_depth:
            raise InvalidInputError(
                f"request body nests deeper than {max_depth} levels; flatten it"
            )
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
