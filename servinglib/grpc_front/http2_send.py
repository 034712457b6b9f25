"""What an HTTP/2 connection sends (:class:`~servinglib.grpc_front.http2.Http2Connection`
is a :class:`SendingSide`): answers within the peer's flow-control credit, resets, the
two-step GOAWAY, and the close once a draining connection's last stream is done."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from servinglib.grpc_front.http2_frames import (
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    GOAWAY_PING,
    GOAWAY_PING_S,
    HEADERS,
    MAX_WINDOW,
    NO_ERROR,
    PING,
    RST_STREAM,
    WINDOW_UPDATE,
    Stream,
    frame,
)

__all__ = ["SendingSide"]


class SendingSide:
    """The sending half of a connection; the connection sets these attributes."""

    _transport: asyncio.Transport | None
    _crowded: Callable[[], bool] | None
    _finally: asyncio.TimerHandle | None
    _send_window: int
    _peer_frame: int
    _last_stream: int
    _waiting: dict[int, Stream]
    streams: dict[int, Stream]
    closed: bool
    leaving: bool
    draining: bool

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self.closed:
            self._transport.write(data)

    def give_stream_credit(self, stream: Stream) -> None:
        """Give back the credit of what ``stream`` read (and resume a paused one)."""
        stream.paused = False
        if stream.received and not stream.ended:
            self._give_credit(stream.id, stream.received)
        stream.received = 0

    def _give_credit(self, stream_id: int, amount: int) -> None:
        self._write(frame(WINDOW_UPDATE, 0, stream_id, amount.to_bytes(4, "big")))

    def answer(self, stream: Stream, headers: bytes, data: bytes, trailers: bytes) -> None:
        """Headers, one DATA payload and trailers: in one write when the windows allow."""
        size = len(data)
        if (
            self.streams.get(stream.id) is stream
            and not stream.outbox
            and size <= self._peer_frame
            and size <= self._send_window
            and size <= stream.send_window
        ):
            self._send_window -= size
            del self.streams[stream.id]
            sid = stream.id
            self._write(
                frame(HEADERS, END_HEADERS, sid, headers)
                + frame(DATA, 0, sid, data)
                + frame(HEADERS, END_HEADERS | END_STREAM, sid, trailers)
            )
            self._closed_stream()
            return
        self.send_headers(stream, headers)
        self.send_data(stream, data)
        self.send_trailers(stream, trailers)

    def send_headers(self, stream: Stream, block: bytes, end_stream: bool = False) -> None:
        """A HEADERS frame (``block``: HPACK-encoded, under 16 KiB); END_STREAM ends it."""
        if self.streams.get(stream.id) is not stream:
            return
        flags = END_HEADERS | (END_STREAM if end_stream else 0)
        self._write(frame(HEADERS, flags, stream.id, block))
        if end_stream:
            self._finish(stream)

    def send_data(self, stream: Stream, data: bytes) -> None:
        """DATA frames of ``data``, now or as the peer gives credit."""
        if self.streams.get(stream.id) is not stream:
            return
        stream.outbox += data
        self._waiting[stream.id] = stream
        self._pump()

    def send_trailers(self, stream: Stream, block: bytes) -> None:
        """The trailers (with END_STREAM), once every byte of data before them is sent."""
        if self.streams.get(stream.id) is not stream:
            return
        if stream.outbox:
            stream.trailers = block
            return
        self.send_headers(stream, block, end_stream=True)

    def reset(self, stream_id: int, code: int) -> None:
        """RST_STREAM ``stream_id`` with ``code``."""
        self._write(frame(RST_STREAM, 0, stream_id, code.to_bytes(4, "big")))
        if self.streams.pop(stream_id, None) is not None:
            self._waiting.pop(stream_id, None)
            self._closed_stream()

    def go_away(self) -> None:
        """Take no new stream; close once the open ones are answered.

        As RFC 9113 6.8 advises: a GOAWAY that still admits every stream, and a PING; the
        client stops opening streams here when it reads the GOAWAY, so once the PING's
        answer arrives, every stream it opened before is known. Then the GOAWAY naming the
        last of them. A stream opened later is refused (REFUSED_STREAM: clients retry it
        elsewhere); none is cut off by a close while its request is on the way.
        """
        if self.leaving or self.draining or self.closed:
            return
        self.leaving = True
        everything = MAX_WINDOW.to_bytes(4, "big") + NO_ERROR.to_bytes(4, "big")
        self._write(frame(GOAWAY, 0, 0, everything) + frame(PING, 0, 0, GOAWAY_PING))
        loop = asyncio.get_running_loop()
        self._finally = loop.call_later(GOAWAY_PING_S, self._final_goaway)

    def _final_goaway(self) -> None:
        if self.draining or self.closed:
            return
        self.draining = True
        if self._finally is not None:
            self._finally.cancel()
        payload = self._last_stream.to_bytes(4, "big") + NO_ERROR.to_bytes(4, "big")
        self._write(frame(GOAWAY, 0, 0, payload))
        self._closed_stream()

    def _finish(self, stream: Stream) -> None:
        self.streams.pop(stream.id, None)
        self._waiting.pop(stream.id, None)
        self._closed_stream()

    def _closed_stream(self) -> None:
        if not self.draining:
            if not self.leaving and self._crowded is not None and self._crowded():
                self.go_away()  # the client reconnects, likely to a less busy worker
            return
        if not self.streams and self._transport is not None:
            self._transport.close()

    def _pump(self) -> None:
        """Send waiting data as far as the windows allow, and trailers after it."""
        for stream in list(self._waiting.values()):
            outbox = stream.outbox
            while outbox and self._send_window > 0 and stream.send_window > 0:
                size = min(len(outbox), self._send_window, stream.send_window, self._peer_frame)
                self._write(frame(DATA, 0, stream.id, bytes(outbox[:size])))
                del outbox[:size]
                self._send_window -= size
                stream.send_window -= size
            if outbox:
                continue
            self._waiting.pop(stream.id, None)
            if stream.trailers is not None:
                self.send_headers(stream, stream.trailers, end_stream=True)
