"""Cheap size estimates of logged values, and the summary that replaces an oversized one.

The prediction log bounds its buffer in bytes, so it must know roughly how large a
record's features and output are without encoding them on the request path: arrays report
``nbytes``, strings and bytes their length, and long lists are extrapolated from a sample.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["approx_bytes", "summary"]

_SAMPLE = 64  # elements of a long list or dict actually measured


def approx_bytes(value: Any, depth: int = 0) -> int:
    """An estimate of ``value``'s JSON size in bytes (within a small factor)."""
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(value, str | bytes | bytearray):
        return len(value) + 2
    if depth > 32:
        return 8
    if isinstance(value, Mapping):
        items = list(value.items())
        return _extrapolated(
            len(value), [len(str(k)) + 4 + approx_bytes(v, depth + 1) for k, v in items[:_SAMPLE]]
        )
    if isinstance(value, list | tuple):
        sample = [approx_bytes(v, depth + 1) + 1 for v in value[:_SAMPLE]]
        return _extrapolated(len(value), sample)
    return 8


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
