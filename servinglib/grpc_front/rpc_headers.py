"""The header side of a gRPC call: the response header blocks, HPACK-encoded once
(literals only, so no dynamic table is shared with the client), statuses as trailers, and
what a request's headers say (path, encodings, ``grpc-timeout``, metadata)."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ACCEPTED_ENCODINGS",
    "CONTENT_TYPE",
    "GZIP_RESPONSE_HEADERS",
    "RESPONSE_HEADERS",
    "STATUS_200",
    "UNSUPPORTED_MEDIA",
    "Head",
    "literal",
    "parse_head",
    "percent_encoded",
    "trailer_block",
]

ACCEPTED_ENCODINGS = "identity,deflate,gzip"
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_RESERVED = frozenset(
    {"te", "content-type", "grpc-encoding", "grpc-accept-encoding", "grpc-timeout"}
)


def integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 5.1)."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: str, value: str) -> bytes:
    """A header field as a literal without indexing, new name (no dynamic table used)."""
    raw_name, raw_value = name.encode("latin-1"), value.encode("latin-1", "replace")
    return b"\x00" + integer(len(raw_name), 7) + raw_name + integer(len(raw_value), 7) + raw_value


STATUS_200 = b"\x88"  # :status 200, static table entry 8
CONTENT_TYPE = b"\x0f\x10" + integer(16, 7) + b"application/grpc"  # static name 31
_ACCEPT = literal("grpc-accept-encoding", ACCEPTED_ENCODINGS)
RESPONSE_HEADERS = STATUS_200 + CONTENT_TYPE + _ACCEPT
GZIP_RESPONSE_HEADERS = RESPONSE_HEADERS + literal("grpc-encoding", "gzip")
_OK_TRAILER = literal("grpc-status", "0")
UNSUPPORTED_MEDIA = b"\x08\x03415"  # :status 415, literal value, static name 8


def percent_encoded(message: str) -> str:
    """``grpc-message``'s encoding: UTF-8, printable ASCII but ``%`` kept as is."""
    raw = message.encode("utf-8")
    if all(0x20 <= b <= 0x7E and b != 0x25 for b in raw):
        return message
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b != 0x25 else f"%{b:02X}" for b in raw)


def trailer_block(code: int, message: str, metadata: Iterable[tuple[str, str]]) -> bytes:
    """``grpc-status``, ``grpc-message`` and trailing ``metadata``, HPACK-encoded."""
    block = bytearray(_OK_TRAILER if code == 0 else literal("grpc-status", str(code)))
    if message:
        block += literal("grpc-message", percent_encoded(message))
    for name, value in metadata:
        block += literal(name, value)
    return bytes(block)


@dataclass(frozen=True)
class Head:
    """What a call's headers say."""

    path: str
    grpc: bool  # POST with a gRPC content type
    encoding: str
    gzip_ok: bool
    timeout_s: float | None
    metadata: tuple[tuple[str, Any], ...]


def _timeout(value: str) -> float | None:
    if len(value) < 2 or not value[:-1].isdigit() or len(value) > 9:
        return None
    unit = _TIMEOUT_UNITS.get(value[-1])
    return None if unit is None else int(value[:-1]) * unit


def parse_head(headers: tuple[tuple[str, str], ...]) -> Head:
    path = method = content_type = encoding = accept = timeout = ""
    metadata: list[tuple[str, Any]] = []
    for name, value in headers:
        if name[0] == ":":
            if name == ":path":
                path = value
            elif name == ":method":
                method = value
        elif name in _RESERVED:
            if name == "content-type":
                content_type = value
            elif name == "grpc-encoding":
                encoding = value
            elif name == "grpc-accept-encoding":
                accept = value
            elif name == "grpc-timeout":
                timeout = value
        elif name.endswith("-bin"):
            try:
                metadata.append((name, base64.b64decode(value + "==")))
            except ValueError:
                continue
        else:
            metadata.append((name, value))
    is_grpc = method == "POST" and (
        content_type == "application/grpc"
        or content_type.startswith(("application/grpc+", "application/grpc;"))
    )
    return Head(
        path,
        is_grpc,
        encoding or "identity",
        "gzip" in accept,
        _timeout(timeout) if timeout else None,
        tuple(metadata),
    )
