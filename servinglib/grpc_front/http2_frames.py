"""The pieces of :mod:`~servinglib.grpc_front.http2` below the connection: frame types,
flags and error codes (RFC 9113), frame encoding, the header-block decoder, and a stream's
state with the protocol its application implements."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import hpack

if TYPE_CHECKING:
    from servinglib.grpc_front.http2 import Http2Connection

__all__ = [
    "MAX_CONCURRENT_STREAMS",
    "MAX_HEADER_LIST_BYTES",
    "HeaderDecoder",
    "Http2Error",
    "Stream",
    "StreamApplication",
    "frame",
    "unpadded",
]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0, 1, 2, 3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 5, 6, 7, 8
COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 9, 11

MAX_FRAME_BYTES = 16_384  # the RFC's default, which this side never raises
MAX_CONCURRENT_STREAMS = 1_000
MAX_HEADER_LIST_BYTES = 65_536
RESETS_ALLOWED = 1_000  # then a client resetting nearly all its streams is cut off
WINDOW_BYTES = 1 << 20  # credit per stream and for the connection
DEFAULT_WINDOW = 65_535
MAX_WINDOW = 2**31 - 1
CACHED_BLOCKS = 64  # header blocks remembered per connection
GOAWAY_PING = b"goaway\x00\x01"  # the PING that follows the first GOAWAY
GOAWAY_PING_S = 5.0  # the final GOAWAY follows this long after the first without an answer


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame, header and payload."""
    return (
        len(payload).to_bytes(3, "big")
        + bytes((kind, flags))
        + stream_id.to_bytes(4, "big")
        + payload
    )


class Http2Error(Exception):
    """A connection error: GOAWAY with ``code``, then close."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


class HeaderDecoder:
    """HPACK decoding that remembers blocks which left the dynamic table as it was.

    A block that inserts nothing reads the same until the table next changes, so it is
    kept (up to ``CACHED_BLOCKS``); any change to the table forgets every kept block.
    """

    def __init__(self) -> None:
        self._decoder = hpack.Decoder(max_header_list_size=MAX_HEADER_LIST_BYTES)
        self._table = self._decoder.header_table
        self._changes = 0
        add = self._table.add

        def counted(name: bytes, value: bytes) -> None:
            self._changes += 1
            add(name, value)

        self._table.add = counted  # type: ignore[method-assign]
        self._known: dict[bytes, tuple[tuple[str, str], ...]] = {}

    def decode(self, block: bytes) -> tuple[tuple[str, str], ...]:
        """The (name, value) pairs of ``block``, in order.

        Raises:
            Http2Error: the block is not valid HPACK (COMPRESSION_ERROR).
        """
        known = self._known.get(block)
        if known is not None:
            return known
        changes, size = self._changes, self._table.maxsize
        try:
            pairs = self._decoder.decode(block, raw=True)
        except Exception as e:  # hpack's errors, and anything a hostile block provokes
            raise Http2Error(COMPRESSION_ERROR, f"undecodable header block: {e}") from e
        headers = tuple((bytes(n).decode("latin-1"), bytes(v).decode("latin-1")) for n, v in pairs)
        if changes != self._changes or size != self._table.maxsize:
            self._known.clear()
        elif len(self._known) < CACHED_BLOCKS:
            self._known[block] = headers
        return headers


class Stream:
    """One request stream: its headers, what the peer sent, what waits to be sent."""

    __slots__ = (
        "app_state",
        "body",
        "ended",
        "headers",
        "id",
        "outbox",
        "paused",
        "received",
        "send_window",
        "trailers",
    )

    def __init__(self, stream_id: int, headers: tuple[tuple[str, str], ...], window: int) -> None:
        self.id = stream_id
        self.headers = headers
        self.body = bytearray()  # data not yet taken by the application
        self.ended = False  # the peer sent END_STREAM
        self.send_window = window
        self.outbox = bytearray()  # data waiting for the peer's credit
        self.trailers: bytes | None = None  # sent once the outbox is empty
        self.received = 0  # bytes read since credit was last given back
        self.paused = False  # the application holds its credit (a reader behind)
        self.app_state: Any = None


class StreamApplication(Protocol):
    """What a connection tells its application."""

    def stream_started(self, connection: Http2Connection, stream: Stream) -> None:
        """A new stream's headers arrived (its data follows)."""

    def stream_data(self, connection: Http2Connection, stream: Stream) -> None:
        """Data was added to ``stream.body``, or the stream ``ended``."""

    def stream_reset(self, connection: Http2Connection, stream: Stream) -> None:
        """The peer reset the stream, or the connection was lost."""


def ignore(flags: int, stream_id: int, payload: bytes) -> None:
    """PRIORITY: this server does not prioritise."""


def unpadded(payload: bytes) -> bytes:
    if not payload:
        raise Http2Error(PROTOCOL_ERROR, "a padded frame with no pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise Http2Error(PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1 : len(payload) - pad]
