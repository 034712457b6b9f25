"""The gRPC front end's HTTP/2 connection, frame by frame: the header block memory, the
two-step GOAWAY and the rapid-reset guard, fed bytes through a recording transport."""

from __future__ import annotations

import asyncio
from typing import Any

import hpack

from servinglib.grpc_front import http2_frames as http2
from servinglib.grpc_front.http2 import Http2Connection
from servinglib.grpc_front.http2_frames import HeaderDecoder, Stream, frame

HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/inference.GRPCInferenceService/ModelInfer"),
    (":authority", "127.0.0.1:8001"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
    ("user-agent", "grpc-c++/1.67.0"),
]


def test_a_remembered_block_never_outlives_the_table_it_was_read_with() -> None:
    encoder = hpack.Encoder()
    twin = hpack.Decoder()  # hpack alone, for the expected reading of every block
    decoder = HeaderDecoder()
    extra = [*HEADERS, ("x-request-id", "a")]
    blocks = [encoder.encode(HEADERS)]  # inserts: never remembered
    blocks += [encoder.encode(HEADERS)] * 3  # indexed only: remembered
    blocks += [encoder.encode(extra), encoder.encode(HEADERS)]  # the table moves on
    blocks += [blocks[1]]  # the same bytes, which now index other entries
    for block in blocks:
        expected = tuple((n.decode(), v.decode()) for n, v in twin.decode(block, raw=True))
        assert decoder.decode(block) == expected


class Transport:
    """Records what the connection writes."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def frames(self) -> list[tuple[int, int, int, bytes]]:
        """(type, flags, stream, payload) of everything written, then forget it."""
        data, found, position = bytes(self.written), [], 0
        while position < len(data):
            length = int.from_bytes(data[position : position + 3], "big")
            kind, flags = data[position + 3], data[position + 4]
            stream = int.from_bytes(data[position + 5 : position + 9], "big")
            found.append((kind, flags, stream, data[position + 9 : position + 9 + length]))
            position += 9 + length
        self.written.clear()
        return found


class Application:
    def __init__(self) -> None:
        self.started: list[int] = []
        self.reset: list[int] = []

    def stream_started(self, connection: Http2Connection, stream: Stream) -> None:
        self.started.append(stream.id)

    def stream_data(self, connection: Http2Connection, stream: Stream) -> None:
        pass

    def stream_reset(self, connection: Http2Connection, stream: Stream) -> None:
        self.reset.append(stream.id)


def _connected() -> tuple[Http2Connection, Transport, Application, hpack.Encoder]:
    app, transport = Application(), Transport()
    connection = Http2Connection(app, lambda _: None)
    connection.connection_made(transport)  # type: ignore[arg-type]
    connection.data_received(http2.PREFACE + frame(http2.SETTINGS, 0, 0))
    transport.frames()
    return connection, transport, app, hpack.Encoder()


def _open(connection: Http2Connection, encoder: hpack.Encoder, stream_id: int) -> None:
    block = encoder.encode(HEADERS)
    connection.data_received(frame(http2.HEADERS, http2.END_HEADERS, stream_id, block))


def _goaway(frames: list[tuple[int, int, int, bytes]]) -> list[tuple[int, int]]:
    """(last stream, error code) of each GOAWAY."""
    return [
        (int.from_bytes(p[:4], "big"), int.from_bytes(p[4:8], "big"))
        for kind, _, _, p in frames
        if kind == http2.GOAWAY
    ]


def test_goaway_admits_streams_until_the_ping_comes_back() -> None:
    async def scenario() -> None:
        connection, transport, app, encoder = _connected()
        _open(connection, encoder, 1)
        connection.go_away()
        first = transport.frames()
        assert _goaway(first) == [(2**31 - 1, 0)]
        (ping,) = [p for kind, _, _, p in first if kind == http2.PING]
        _open(connection, encoder, 3)  # sent before the client read the GOAWAY: served
        assert app.started == [1, 3]
        connection.data_received(frame(http2.PING, http2.ACK, 0, ping))
        assert _goaway(transport.frames()) == [(3, 0)]
        _open(connection, encoder, 5)  # after the final GOAWAY: refused, safe to retry
        refused = [
            (stream, int.from_bytes(p, "big"))
            for kind, _, stream, p in transport.frames()
            if kind == http2.RST_STREAM
        ]
        assert refused == [(5, http2.REFUSED_STREAM)]
        assert app.started == [1, 3]
        assert not transport.closed  # streams 1 and 3 are still open
        for stream_id in (1, 3):
            connection.send_headers(connection.streams[stream_id], b"\x88", end_stream=True)
        assert transport.closed

    asyncio.run(scenario())


def test_a_client_resetting_nearly_every_stream_is_cut_off() -> None:
    connection, transport, app, encoder = _connected()
    stream_id = 1
    code: Any = None
    while not transport.closed:
        _open(connection, encoder, stream_id)
        reset = frame(http2.RST_STREAM, 0, stream_id, (http2.CANCEL).to_bytes(4, "big"))
        connection.data_received(reset)
        stream_id += 2
        assert stream_id < 2 * (http2.RESETS_ALLOWED + 10), "never cut off"
    code = _goaway(transport.frames())[-1][1]
    assert code == http2.ENHANCE_YOUR_CALM
    assert len(app.reset) == http2.RESETS_ALLOWED


def test_a_client_resetting_some_streams_is_served() -> None:
    connection, transport, _, encoder = _connected()
    for n in range(3 * http2.RESETS_ALLOWED):
        stream_id = 2 * n + 1
        _open(connection, encoder, stream_id)
        if n % 3:  # two in three reset (timeouts, hedged calls): not an attack
            code = (http2.CANCEL).to_bytes(4, "big")
            connection.data_received(frame(http2.RST_STREAM, 0, stream_id, code))
        else:
            connection.send_headers(connection.streams[stream_id], b"\x88", end_stream=True)
    assert not transport.closed
