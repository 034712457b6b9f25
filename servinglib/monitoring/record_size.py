"""Cheap size estimates of logged values, and the summary that replaces an oversized one.

The prediction log bounds its buffer in bytes, so it must know roughly how large a
record's features and output are without encoding them on the request path: arrays report
``nbytes``, strings and bytes their length, and long lists are extrapolated from a sample.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice
from typing import Any

__all__ = ["approx_bytes", "summary"]

_SAMPLE = 64  # elements of a long list or dict actually measured


_SCALARS = frozenset({float, int, bool, type(None)})


def approx_bytes(value: Any, depth: int = 0) -> int:
    """An estimate of ``value``'s JSON size in bytes (within a small factor)."""
    kind = type(value)  # exact types first: this runs on the request path
    if kind in _SCALARS:
        return 8
    if kind is str:
        return len(value) + 2
    if kind is dict:
        return _mapping(value, depth)
    if kind is list or kind is tuple:
        return _sequence(value, depth)
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(value, str | bytes | bytearray):
        return len(value) + 2
    if isinstance(value, Mapping):
        return _mapping(value, depth)
    if isinstance(value, list | tuple):
        return _sequence(value, depth)
    return 8


def _mapping(value: Mapping[Any, Any], depth: int) -> int:
    if depth > 32:
        return 8
    count = len(value)
    if not count:
        return 2
    items = value.items() if count <= _SAMPLE else islice(value.items(), _SAMPLE)
    total, nested = 0, depth + 1
    for key, item in items:  # a loop, not a call per item: scalars are the usual values
        kind = type(item)
        size = 8 if kind in _SCALARS else approx_bytes(item, nested)
        total += (len(key) if type(key) is str else len(str(key))) + 4 + size
    return 2 + total * count // min(count, _SAMPLE)


def _sequence(value: list[Any] | tuple[Any, ...], depth: int) -> int:
    if depth > 32:
        return 8
    sample = value if len(value) <= _SAMPLE else value[:_SAMPLE]
    if _SCALARS.issuperset(map(type, sample)):  # numbers only: 8 bytes and a comma each
        return 2 + 9 * len(value)
    return _extrapolated(len(value), [approx_bytes(v, depth + 1) + 1 for v in sample])


def _extrapolated(count: int, sample: list[int]) -> int:
    if not sample:
        return 2
    return 2 + sum(sample) * count // len(sample)


def summary(value: Any, size: int) -> dict[str, Any]:
    """What the log keeps of a value larger than ``max_record_bytes``."""
    kept: dict[str, Any] = {"truncated": True, "type": type(value).__name__, "approx_bytes": size}
    shape = getattr(value, "shape", None)
    if shape is not None:
        kept["shape"] = list(shape)
    elif isinstance(value, Mapping):
        kept["keys"] = [str(k) for k in list(value)[:_SAMPLE]]
    elif isinstance(value, list | tuple):
        kept["length"] = len(value)
    return kept
