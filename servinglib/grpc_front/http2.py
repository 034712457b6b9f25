"""HTTP/2 as gRPC uses it (RFC 9113), served by an asyncio protocol per connection.

grpcio's server costs more CPU per call than servinglib's whole REST request path (a bare
grpcio asyncio server answering a fixed message: 350-520 us of worker CPU per call, against
about 150 us for REST through uvicorn and httptools). Most of that is generic machinery a
gRPC server does not need. This connection speaks what gRPC clients send, with nothing
in between:

* frames are cut from the socket's bytes with no copy beyond the payload;
* a header block is decoded by ``hpack`` once: clients send the same block for every call
  once their dynamic table holds it, so a block that changed nothing in the table is
  remembered and the next identical one costs a dictionary lookup;
* an answer's HEADERS, DATA and trailers leave in one write.

Flow control: the connection and each stream advertise a 1 MiB window and give credit
back as data is read (a stream whose reader is behind gets none until it catches up);
data sent waits for the peer's credit. Limits: header lists over
``MAX_HEADER_LIST_BYTES``, more than ``MAX_CONCURRENT_STREAMS`` open streams, and frames
over 16 KiB are refused as the RFC says; a client that resets nine in ten of its streams,
past ``RESETS_ALLOWED`` (the "rapid reset" attack, CVE-2023-44487), is cut off
(ENHANCE_YOUR_CALM). A connection error sends GOAWAY with its code and closes.

The application is a :class:`StreamApplication`: told of each new stream, of its data,
of its end and of its reset; it answers through :meth:`Http2Connection.send_headers`,
:meth:`~Http2Connection.send_data` and :meth:`~Http2Connection.send_trailers`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import cast

from servinglib.grpc_front.http2_frames import (
    ACK,
    CONTINUATION,
    DATA,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    GOAWAY,
    GOAWAY_PING,
    HEADERS,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_BYTES,
    MAX_HEADER_LIST_BYTES,
    MAX_WINDOW,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RESETS_ALLOWED,
    RST_STREAM,
    SETTINGS,
    WINDOW_BYTES,
    WINDOW_UPDATE,
    HeaderDecoder,
    Http2Error,
    Stream,
    StreamApplication,
    frame,
    ignore,
    unpadded,
)
from servinglib.grpc_front.http2_send import SendingSide

__all__ = ["Http2Connection"]

log = logging.getLogger("servinglib.grpc")


class Http2Connection(SendingSide, asyncio.Protocol):
    """The server side of one HTTP/2 connection (prior knowledge, no TLS: h2c)."""

    def __init__(
        self,
        app: StreamApplication,
        on_close: Callable[[Http2Connection], object],
        crowded: Callable[[], bool] | None = None,
    ) -> None:
        self._app = app
        self._on_close = on_close  # told when the connection is lost
        self._crowded = crowded  # asked after each answered stream: True sends GOAWAY
        self._transport: asyncio.Transport | None = None
        self._pending = b""
        self._preface = False
        self.streams: dict[int, Stream] = {}
        self._decoder = HeaderDecoder()
        self._last_stream = 0
        self._block: bytearray | None = None  # a header block awaiting CONTINUATION
        self._block_stream = 0
        self._block_ends = False
        self._send_window = DEFAULT_WINDOW
        self._peer_window = DEFAULT_WINDOW  # the peer's SETTINGS_INITIAL_WINDOW_SIZE
        self._peer_frame = MAX_FRAME_BYTES
        self._received = 0  # bytes read since connection credit was last given back
        self._waiting: dict[int, Stream] = {}  # streams with data waiting for credit
        self.opened = 0  # streams opened so far
        self._resets = 0  # streams the client reset
        self.leaving = False  # the first GOAWAY sent: the client opens no more streams here
        self.draining = False  # the final GOAWAY sent: no new streams
        self._finally: asyncio.TimerHandle | None = None
        self.closed = False
        self._handlers = {
            DATA: self._data,
            HEADERS: self._headers,
            PRIORITY: ignore,
            RST_STREAM: self._rst_stream,
            SETTINGS: self._settings,
            PUSH_PROMISE: self._push_promise,
            PING: self._ping,
            GOAWAY: self._goaway,
            WINDOW_UPDATE: self._window_update,
            CONTINUATION: self._continuation,
        }

    # -- the socket -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        settings = b"".join(
            key.to_bytes(2, "big") + value.to_bytes(4, "big")
            for key, value in (
                (0x3, MAX_CONCURRENT_STREAMS),
                (0x4, WINDOW_BYTES),
                (0x6, MAX_HEADER_LIST_BYTES),
            )
        )
        credit = (WINDOW_BYTES - DEFAULT_WINDOW).to_bytes(4, "big")
        self._write(frame(SETTINGS, 0, 0, settings) + frame(WINDOW_UPDATE, 0, 0, credit))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._finally is not None:
            self._finally.cancel()
        streams, self.streams = self.streams, {}
        self._waiting.clear()
        for stream in streams.values():
            self._app.stream_reset(self, stream)
        self._on_close(self)

    def data_received(self, data: bytes) -> None:
        if self._pending:
            data = self._pending + data
        try:
            if not self._preface:
                if len(data) < len(PREFACE):
                    if not PREFACE.startswith(data):
                        raise Http2Error(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
                    self._pending = data
                    return
                if not data.startswith(PREFACE):
                    raise Http2Error(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
                self._preface = True
                data = data[len(PREFACE) :]
            position, size = 0, len(data)
            handlers = self._handlers
            while size - position >= 9:
                length = int.from_bytes(data[position : position + 3], "big")
                if length > MAX_FRAME_BYTES:
                    raise Http2Error(FRAME_SIZE_ERROR, f"a frame of {length} bytes")
                end = position + 9 + length
                if end > size:
                    break
                kind, flags = data[position + 3], data[position + 4]
                stream_id = int.from_bytes(data[position + 5 : position + 9], "big") & MAX_WINDOW
                payload = data[position + 9 : end]
                position = end
                if self._block is not None and kind != CONTINUATION:
                    raise Http2Error(PROTOCOL_ERROR, "a header block was interrupted")
                handler = handlers.get(kind)
                if handler is not None:  # unknown frame types are ignored (RFC 9113 5.5)
                    handler(flags, stream_id, payload)
                if self.closed:
                    return
            self._pending = data[position:] if position < size else b""
        except Http2Error as e:
            self.abort(e.code, str(e))

    def abort(self, code: int, reason: str) -> None:
        """GOAWAY with ``code`` and close the connection."""
        log.info("gRPC connection closed: %s (HTTP/2 error %d)", reason, code)
        if self._transport is not None and not self.closed:
            payload = self._last_stream.to_bytes(4, "big") + code.to_bytes(4, "big")
            self._transport.write(frame(GOAWAY, 0, 0, payload + reason.encode()[:200]))
            self._transport.close()
        self.closed = True

    # -- frames from the peer ---------------------------------------------------------

    def _headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise Http2Error(PROTOCOL_ERROR, "HEADERS on stream 0")
        if flags & PADDED:
            payload = unpadded(payload)
        if flags & PRIORITY_FLAG:
            payload = payload[5:]
        if not flags & END_HEADERS:
            self._block = bytearray(payload)
            self._block_stream, self._block_ends = stream_id, bool(flags & END_STREAM)
            return
        self._header_block(stream_id, payload, bool(flags & END_STREAM))

    def _continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        block = self._block
        if block is None or stream_id != self._block_stream:
            raise Http2Error(PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
        block += payload
        if len(block) > MAX_HEADER_LIST_BYTES:
            raise Http2Error(ENHANCE_YOUR_CALM, "a header block over 64 KiB")
        if flags & END_HEADERS:
            self._block = None
            self._header_block(stream_id, bytes(block), self._block_ends)

    def _header_block(self, stream_id: int, block: bytes, end_stream: bool) -> None:
        headers = self._decoder.decode(block)  # always: it keeps the HPACK table in step
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers from the peer end its stream
            if not end_stream:
                raise Http2Error(PROTOCOL_ERROR, "trailers without END_STREAM")
            self._end(stream)
            return
        if stream_id % 2 == 0 or stream_id <= self._last_stream:
            raise Http2Error(PROTOCOL_ERROR, f"stream {stream_id} cannot be opened")
        self._last_stream = stream_id
        if self.draining or len(self.streams) >= MAX_CONCURRENT_STREAMS:
            self.reset(stream_id, REFUSED_STREAM)
            return
        stream = Stream(stream_id, headers, self._peer_window)
        self.streams[stream_id] = stream
        self.opened += 1
        self._app.stream_started(self, stream)
        if end_stream and stream_id in self.streams:
            self._end(stream)

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        self._received += len(payload)  # padding counts against the window too
        if self._received >= WINDOW_BYTES // 2:
            self._give_credit(0, self._received)
            self._received = 0
        stream = self.streams.get(stream_id)
        if stream is None or stream.ended:
            if stream_id == 0 or stream_id > self._last_stream:
                raise Http2Error(PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            return  # a stream this side already answered or reset: drop what still comes
        stream.received += len(payload)
        if flags & PADDED:
            payload = unpadded(payload)
        stream.body += payload
        if flags & END_STREAM:
            self._end(stream)
            return
        if stream.received >= WINDOW_BYTES // 2 and not stream.paused:
            self.give_stream_credit(stream)
        self._app.stream_data(self, stream)

    def _end(self, stream: Stream) -> None:
        stream.ended = True
        self._app.stream_data(self, stream)

    def _rst_stream(self, flags: int, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise Http2Error(FRAME_SIZE_ERROR, "RST_STREAM of the wrong size")
        self._resets += 1
        if self._resets > RESETS_ALLOWED and self._resets * 10 > self.opened * 9:
            raise Http2Error(ENHANCE_YOUR_CALM, f"{self._resets} streams reset by the client")
        stream = self.streams.pop(stream_id, None)
        self._waiting.pop(stream_id, None)
        if stream is not None:
            self._app.stream_reset(self, stream)

    def _settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0 or len(payload) % 6:
            raise Http2Error(PROTOCOL_ERROR, "a malformed SETTINGS frame")
        if flags & ACK:
            return
        for offset in range(0, len(payload), 6):
            key = int.from_bytes(payload[offset : offset + 2], "big")
            value = int.from_bytes(payload[offset + 2 : offset + 6], "big")
            if key == 0x4:  # SETTINGS_INITIAL_WINDOW_SIZE: every open stream moves with it
                if value > MAX_WINDOW:
                    raise Http2Error(FLOW_CONTROL_ERROR, "a window over 2^31-1")
                delta, self._peer_window = value - self._peer_window, value
                for stream in self.streams.values():
                    stream.send_window += delta
            elif key == 0x5:
                if not MAX_FRAME_BYTES <= value <= 16_777_215:
                    raise Http2Error(PROTOCOL_ERROR, "an invalid SETTINGS_MAX_FRAME_SIZE")
                self._peer_frame = value
        self._write(frame(SETTINGS, ACK, 0))
        self._pump()

    def _push_promise(self, flags: int, stream_id: int, payload: bytes) -> None:
        raise Http2Error(PROTOCOL_ERROR, "a client cannot push")

    def _ping(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0 or len(payload) != 8:
            raise Http2Error(PROTOCOL_ERROR, "a malformed PING")
        if not flags & ACK:
            self._write(frame(PING, ACK, 0, payload))
        elif payload == GOAWAY_PING:
            self._final_goaway()

    def _goaway(self, flags: int, stream_id: int, payload: bytes) -> None:
        self.draining = True
        if not self.streams and self._transport is not None:
            self._transport.close()

    def _window_update(self, flags: int, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise Http2Error(FRAME_SIZE_ERROR, "WINDOW_UPDATE of the wrong size")
        increment = int.from_bytes(payload, "big") & MAX_WINDOW
        if stream_id == 0:
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise Http2Error(FLOW_CONTROL_ERROR, "the connection window overflowed")
            self._pump()
            return
        stream = self.streams.get(stream_id)
        if stream is not None:
            stream.send_window += increment
            if stream.outbox:
                self._pump()
