"""Request decoding and response encoding by HTTP content coding (gzip, deflate)."""

from __future__ import annotations

import gzip
import zlib

import pytest

from servinglib.wire.content_coding import (
    ContentCodingError,
    decode_body,
    encode_body,
    response_coding,
)


def gzipped(data: bytes, level: int = 9) -> bytes:
    """``gzip.compress`` with a fixed header time: the same bytes (and test ids) every run."""
    return gzip.compress(data, level, mtime=0)


BODY = b'{"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2, 3]}]}' * 50


@pytest.mark.parametrize(
    ("header", "encoded"),
    [
        (None, BODY),
        ("identity", BODY),
        ("gzip", gzipped(BODY)),
        ("x-gzip", gzipped(BODY)),
        ("GZIP", gzipped(BODY)),
        ("deflate", zlib.compress(BODY)),
        ("gzip, deflate", zlib.compress(gzipped(BODY))),  # applied left to right
    ],
)
def test_decodes_each_coding(header: str | None, encoded: bytes) -> None:
    assert decode_body(encoded, header, limit=len(BODY)) == BODY


def test_raw_deflate_is_accepted_too() -> None:
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    assert decode_body(raw.compress(BODY) + raw.flush(), "deflate", limit=len(BODY)) == BODY


def test_concatenated_gzip_members_are_one_body() -> None:
    halves = gzipped(BODY[:100]) + gzipped(BODY[100:])
    assert decode_body(halves, "gzip", limit=len(BODY)) == BODY


def test_zip_bomb_stops_at_the_limit() -> None:
    bomb = gzipped(b"\0" * (64 * 1024 * 1024))  # 64 MiB of zeros in ~64 KiB
    assert len(bomb) < 100_000
    with pytest.raises(ContentCodingError, match="decompressed body is larger than") as caught:
        decode_body(bomb, "gzip", limit=1024 * 1024)
    assert caught.value.problem == "too_large"


def test_limit_is_exact() -> None:
    assert decode_body(gzipped(BODY), "gzip", limit=len(BODY)) == BODY
    with pytest.raises(ContentCodingError):
        decode_body(gzipped(BODY), "gzip", limit=len(BODY) - 1)


@pytest.mark.parametrize(
    ("header", "data", "problem", "message"),
    [
        ("br", BODY, "unsupported", "'br' is not supported"),
        ("gzip", BODY, "invalid", "not valid gzip data"),
        ("deflate", b"\x00\x01garbage", "invalid", "not valid deflate data"),
        ("gzip", gzipped(BODY)[:-20], "invalid", "not valid gzip data"),
    ],
)
def test_bad_codings_name_the_problem(header: str, data: bytes, problem: str, message: str) -> None:
    with pytest.raises(ContentCodingError, match=message) as caught:
        decode_body(data, header, limit=10 * len(BODY))
    assert caught.value.problem == problem


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, None),
        ("", None),
        ("identity", None),
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("gzip, deflate", "gzip"),
        ("deflate;q=1, gzip;q=0.5", "deflate"),
        ("gzip;q=0", None),
        ("*", "gzip"),
        ("*;q=0.2, gzip;q=0", "deflate"),
        ("br", None),
        ("gzip;q=bogus, deflate", "deflate"),
        ("GZIP", "gzip"),
        ("x-gzip", "gzip"),
        ("*, gzip;q=0", "deflate"),  # the named coding wins over the wildcard, in any order
        ("gzip;q=0.2, *;q=0.9", "deflate"),
        ("deflate;q=0.5, gzip;q=0.5", "gzip"),
        ("*;q=0", None),
    ],
)
def test_response_coding_follows_accept_encoding(accept: str | None, expected: str | None) -> None:
    assert response_coding(accept) == expected


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_encode_round_trips(coding: str) -> None:
    assert decode_body(encode_body(BODY, coding), coding, limit=len(BODY)) == BODY


def test_encode_refuses_unknown_coding() -> None:
    with pytest.raises(ValueError, match="unknown coding 'br'"):
        encode_body(BODY, "br")


def test_a_small_body_is_decoded_inline_and_a_bomb_is_left_for_a_thread() -> None:
    from servinglib.wire.content_coding import decode_small_body

    assert decode_small_body(gzipped(BODY), "gzip", 8 << 20, small=len(BODY)) == BODY
    assert decode_small_body(BODY, None, 8 << 20, small=len(BODY)) == BODY
    bomb = gzipped(b" " * (7_500 * 1024), 9)  # 7.5 MiB from about 7.5 KiB
    assert len(bomb) < 10_000
    assert decode_small_body(bomb, "gzip", 8 << 20, small=256 * 1024) is None
    assert (
        decode_small_body(
            zlib.compress(gzipped(b" " * 300_000)), "gzip, deflate", 8 << 20, small=256 * 1024
        )
        is None
    )
    with pytest.raises(ContentCodingError) as refused:  # errors are found inline as before
        decode_small_body(b"not gzip", "gzip", 8 << 20, small=256 * 1024)
    assert refused.value.problem == "invalid"
