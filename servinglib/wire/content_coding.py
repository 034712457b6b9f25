"""HTTP content codings of Open Inference bodies: gzip and deflate, both ways.

Triton's clients compress requests (``Content-Encoding: gzip`` or ``deflate``) and ask for
compressed answers (``Accept-Encoding``). These functions are transport-neutral: they take
header values and bytes, and raise :class:`ContentCodingError` saying what is wrong
(its ``problem``); the front ends choose the status.

The body-size limit applies to the *decoded* size, and decoding stops as soon as it is
passed, so a small compressed body cannot expand into gigabytes (a "zip bomb").

Example::

    body = decode_body(raw, headers.get("Content-Encoding"), limit=8 * 1024 * 1024)
    coding = response_coding(headers.get("Accept-Encoding"))
    if coding:
        payload = encode_body(payload, coding)
"""

from __future__ import annotations

import zlib
from functools import lru_cache
from typing import Literal

from servinglib.errors import InvalidInputError

__all__ = [
    "CODINGS",
    "ContentCodingError",
    "decode_body",
    "decode_small_body",
    "encode_body",
    "response_coding",
]

# Codings servinglib decodes and encodes, in the order it prefers them for answers.
CODINGS = ("gzip", "deflate")
_ALIASES = {"x-gzip": "gzip"}
_CHUNK = 64 * 1024


CodingProblem = Literal["unsupported", "invalid", "too_large"]


class ContentCodingError(InvalidInputError):
    """A request body that cannot be decoded, and why: an ``unsupported`` coding, data
    ``invalid`` in its coding, or a decoded body ``too_large`` for the limit."""

    def __init__(self, message: str, problem: CodingProblem) -> None:
        super().__init__(message)
        self.problem: CodingProblem = problem


def decode_body(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """The body with every coding of ``Content-Encoding`` undone (last applied, first undone).

    Raises:
        ContentCodingError: ``unsupported`` for a coding other than gzip, deflate or
            identity; ``invalid`` for data that is not valid in its coding; ``too_large``
            when the decoded body passes ``limit``.
    """
    decoded = _decode(body, content_encoding, limit, None)
    assert decoded is not None  # only a stop_past stops early
    return decoded


def decode_small_body(
    body: bytes, content_encoding: str | None, limit: int, small: int
) -> bytes | None:
    """:func:`decode_body`, or None once the decoded body passes ``small`` bytes.

    An event loop inflates a body itself only while it stays small: a 7.6 KiB gzip body
    can hold 7.5 MiB. It stops one 64 KiB step past ``small`` and hands the body to a
    thread, which decodes it again with :func:`decode_body`. Same errors.
    """
    return _decode(body, content_encoding, limit, small)


def _decode(
    body: bytes, content_encoding: str | None, limit: int, stop_past: int | None
) -> bytes | None:
    names = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    for coding in reversed([_ALIASES.get(name, name) for name in names]):
        if coding == "identity":
            continue
        if coding not in CODINGS:
            raise ContentCodingError(
                f"Content-Encoding {coding!r} is not supported; send gzip, deflate or an "
                "uncompressed body",
                "unsupported",
            )
        inflated = _inflate(body, coding, limit, stop_past)
        if inflated is None:
            return None
        body = inflated
    return body


@lru_cache(maxsize=64)  # clients repeat one header: parse it once
def response_coding(accept_encoding: str | None) -> str | None:
    """The coding to compress an answer with, from ``Accept-Encoding`` (None: send as is).

    Read as RFC 9110 says: ``q=0`` refuses a coding, ``*`` stands for any coding not
    named, and among acceptable codings the highest q wins (gzip before deflate on a tie).
    ``x-gzip`` is gzip.
    """
    if not accept_encoding:
        return None
    named = _qualities(accept_encoding)
    best: tuple[float, str] | None = None
    for coding in CODINGS:
        given = [q for name, q in named.items() if _ALIASES.get(name, name) == coding]
        q = max(given) if given else named.get("*", 0.0)
        if q > 0 and (best is None or q > best[0]):
            best = (q, coding)
    return None if best is None else best[1]


def _qualities(header: str) -> dict[str, float]:
    """``{coding: q}`` of an ``Accept-Encoding`` value (a q that is not a number is 0)."""
    named: dict[str, float] = {}
    for item in header.split(","):
        name, *params = item.split(";")
        name = name.strip().lower()
        if not name:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = min(1.0, max(0.0, float(value.strip())))
                except ValueError:
                    q = 0.0
        named[name] = max(q, named.get(name, 0.0))
    return named


def encode_body(body: bytes, coding: str) -> bytes:
    """``body`` compressed with ``coding`` (one of :data:`CODINGS`), at a fast level."""
    if coding == "gzip":
        compressor = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    elif coding == "deflate":
        compressor = zlib.compressobj(1, zlib.DEFLATED, zlib.MAX_WBITS)
    else:
        raise ValueError(f"unknown coding {coding!r}; use one of {CODINGS}")
    return compressor.compress(body) + compressor.flush()


def _inflate(data: bytes, coding: str, limit: int, stop_past: int | None) -> bytes | None:
    """Decompress one coding, never producing more than ``limit`` bytes.

    None once the output passes ``stop_past`` (when given): the caller decodes it elsewhere.
    """
    try:
        if coding == "gzip":
            return _inflate_members(data, 16 + zlib.MAX_WBITS, limit, stop_past)
        try:  # RFC 9110: zlib format
            return _inflate_members(data, zlib.MAX_WBITS, limit, stop_past)
        except zlib.error:  # raw deflate, as sent by some
            return _inflate_members(data, -zlib.MAX_WBITS, limit, stop_past)
    except zlib.error as e:
        raise ContentCodingError(
            f"the body is not valid {coding} data ({e}); compress it with {coding} or drop "
            "the Content-Encoding header",
            "invalid",
        ) from None


def _inflate_members(data: bytes, wbits: int, limit: int, stop_past: int | None) -> bytes | None:
    """Every member of a (possibly concatenated) stream, stopping past ``limit`` bytes.

    Inflated 64 KiB at a time, so a body is never inflated further than one step past
    ``limit`` (413) or ``stop_past`` (None).
    """
    out = bytearray()
    while data:
        inflater = zlib.decompressobj(wbits)
        chunk = inflater.decompress(data, _CHUNK)
        while True:
            out += chunk
            if len(out) > limit:
                raise _too_large(limit)
            if stop_past is not None and len(out) > stop_past:
                return None
            if not inflater.unconsumed_tail:
                break
            chunk = inflater.decompress(inflater.unconsumed_tail, _CHUNK)
        out += inflater.flush()
        if not inflater.eof:
            raise zlib.error("the stream ends before its last block")
        data = inflater.unused_data if wbits > 0 and wbits & 16 else b""
    if len(out) > limit:
        raise _too_large(limit)
    return bytes(out)


def _too_large(limit: int) -> ContentCodingError:
    return ContentCodingError(
        f"the decompressed body is larger than the limit of {limit} bytes "
        "(server.max_request_body_bytes); send a smaller body",
        "too_large",
    )
