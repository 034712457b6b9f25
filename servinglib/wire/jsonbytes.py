"""Fast, strict JSON encoding of answers: orjson, NumPy arrays natively, never NaN.

Encoding a 384-float embedding with ``json.dumps`` after converting it to Python lists costs
about 240 us, as much as the rest of the request; orjson writes the array itself in about
7 us. orjson turns NaN and Infinity into ``null`` silently; clients must never receive a
corrupted answer that parses, so a document containing ``null`` is re-encoded the strict way
(rare: only outputs with a real ``null`` or a non-finite number pay for it). What orjson
refuses but JSON can carry (integers beyond 64 bits, lone surrogates) is encoded by the
standard library too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

__all__ = ["NonFiniteError", "dumps", "to_plain"]

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


class NonFiniteError(ValueError):
    """The value holds NaN or Infinity, which JSON cannot carry."""


def to_plain(value: Any) -> Any:
    """Convert NumPy arrays and scalars (and tuples) into plain JSON-like Python values."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf":
            return value.tolist()  # already plain numbers
        return to_plain(value.tolist())
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return to_plain(tolist())
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def _fallback(value: Any) -> Any:
    """What orjson cannot write itself: non-contiguous arrays, bytes, exotic NumPy types."""
    if isinstance(value, np.ndarray | np.generic | bytes):
        return to_plain(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(value: Any, *, default: Any = None) -> bytes:
    """Encode ``value`` as compact UTF-8 JSON.

    ``default`` converts objects JSON cannot carry (e.g. ``str``); without it they raise.

    Raises:
        TypeError: something in ``value`` is not JSON serializable.
        NonFiniteError: ``value`` holds NaN or Infinity.
    """

    def fallback(obj: Any) -> Any:
        try:
            return _fallback(obj)
        except TypeError:
            return default(obj)

    try:
        encoded = orjson.dumps(
            value, default=_fallback if default is None else fallback, option=_OPTIONS
        )
    except orjson.JSONEncodeError:
        # What orjson refuses but JSON carries (integers beyond 64 bits, strings with lone
        # surrogates, which a JSON request can contain) goes the standard library's way.
        return _strict(value, default).encode()
    if b"null" in encoded:
        _strict(value, default)
    return encoded


def _strict(value: Any, default: Any) -> str:
    """The standard library's encoding, refusing NaN and Infinity."""
    try:
        return json.dumps(to_plain(value), allow_nan=False, default=default, separators=(",", ":"))
    except ValueError as e:
        if "Out of range float values" in str(e):
            raise NonFiniteError("NaN and Infinity are not JSON") from e
        raise TypeError(str(e)) from e
