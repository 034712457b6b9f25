"""The gRPC front end's HTTP/2 layer against an independent HTTP/2 implementation (``h2``)
and raw bytes: flow control both ways with small windows, the RFC's connection errors,
refused streams, and fuzzed frames. No worker dies, and every other connection is served
throughout."""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
import h2.config
import h2.connection
import h2.events
import h2.settings
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from tests.conftest import SERVICE_CONFIG, stop, worker_pids
from tests.integration._tools_grpc import GrpcServer, launch_grpc, wait_until_answered

pytestmark = pytest.mark.integration

INFER = "/inference.GRPCInferenceService/ModelInfer"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
GOAWAY = 7


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcServer]:
    grpc_server = launch_grpc(SERVICE_CONFIG, tmp_path_factory.mktemp("h2"), "--workers", "2")
    wait_until_answered(grpc_server)
    yield grpc_server
    stop(grpc_server.live.process)


def _request(values: np.ndarray) -> bytes:
    request = pb.ModelInferRequest(model_name="echo", id="h2")
    request.inputs.add(name="x", datatype="FP32", shape=[values.size])
    request.raw_input_contents.append(values.astype("<f4").tobytes())
    body = request.SerializeToString()
    return b"\x00" + len(body).to_bytes(4, "big") + body


@dataclass
class Exchange:
    """What came back on one stream."""

    headers: dict[str, str] = field(default_factory=dict)
    data: bytearray = field(default_factory=bytearray)
    trailers: dict[str, str] = field(default_factory=dict)
    reset: int | None = None


def _headers(path: str = INFER, content_type: str = "application/grpc") -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "127.0.0.1"),
        ("content-type", content_type),
        ("te", "trailers"),
    ]


def _h2_call(
    address: str,
    body: bytes,
    window: int = 65_535,
    headers: list[tuple[str, str]] | None = None,
    streams: int = 1,
) -> list[Exchange]:
    """``streams`` calls at once on one connection from ``h2``: every stream's headers
    first, then the bodies as the server's credit allows, reading with ``window`` bytes of
    credit per stream (given back only as data is read)."""
    host, port = address.rsplit(":", 1)
    config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    client = h2.connection.H2Connection(config)
    client.local_settings = h2.settings.Settings(
        client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window}
    )
    client.initiate_connection()
    exchanges: dict[int, Exchange] = {}
    unsent: dict[int, memoryview] = {}
    frames = _AfterGoaway()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        for _ in range(streams):
            stream_id = client.get_next_available_stream_id()
            exchanges[stream_id] = Exchange()
            client.send_headers(stream_id, headers or _headers())
            unsent[stream_id] = memoryview(body)
        open_streams = set(exchanges)
        while open_streams:
            for stream_id in list(unsent):
                if exchanges[stream_id].reset is not None or stream_id not in open_streams:
                    del unsent[stream_id]
                    continue
                while unsent[stream_id] and (
                    size := min(
                        client.local_flow_control_window(stream_id),
                        client.max_outbound_frame_size,
                        len(unsent[stream_id]),
                    )
                ):
                    client.send_data(stream_id, bytes(unsent[stream_id][:size]))
                    unsent[stream_id] = unsent[stream_id][size:]
                if not unsent[stream_id]:
                    client.end_stream(stream_id)
                    del unsent[stream_id]
            sock.sendall(client.data_to_send())
            data = sock.recv(65_536)
            assert data, "the server closed the connection with calls open"
            for event in client.receive_data(frames.kept(data)):
                exchange = exchanges.get(getattr(event, "stream_id", 0))
                if isinstance(event, h2.events.ResponseReceived):
                    exchange.headers = dict(event.headers)
                elif isinstance(event, h2.events.DataReceived):
                    exchange.data += event.data
                    client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.TrailersReceived):
                    exchange.trailers = dict(event.headers)
                elif isinstance(event, h2.events.StreamReset):
                    exchange.reset = event.error_code
                    open_streams.discard(event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    open_streams.discard(event.stream_id)
            sock.sendall(client.data_to_send())
    return list(exchanges.values())


def _answer(exchange: Exchange) -> pb.ModelInferResponse:
    assert exchange.headers.get(":status") == "200", exchange
    assert exchange.trailers.get("grpc-status") == "0", exchange.trailers
    size = int.from_bytes(exchange.data[1:5], "big")
    assert (exchange.data[0], len(exchange.data)) == (0, 5 + size)
    return pb.ModelInferResponse.FromString(bytes(exchange.data[5:]))


def test_flow_control_both_ways_with_small_windows(server: GrpcServer) -> None:
    # 3 MiB each way through a client that gives 16 KiB of credit at a time, and four
    # such calls at once on one connection: the server's sends wait for credit, its
    # own window (1 MiB) is given back as it reads.
    values = np.arange(3 << 18, dtype=np.float32)
    for exchange in _h2_call(server.grpc_address, _request(values), window=16_384, streams=4):
        answer = _answer(exchange)
        assert answer.raw_output_contents[0] == values.tobytes()


def test_not_grpc_unknown_method_and_unknown_encoding(server: GrpcServer) -> None:
    body = _request(np.ones(2, np.float32))
    (plain,) = _h2_call(server.grpc_address, body, headers=_headers(content_type="text/plain"))
    assert plain.headers[":status"] == "415"
    (unknown,) = _h2_call(server.grpc_address, body, headers=_headers("/no.Such/Method"))
    assert unknown.headers["grpc-status"] == "12"  # UNIMPLEMENTED, trailers-only
    brotli = [*_headers(), ("grpc-encoding", "br")]
    (encoded,) = _h2_call(server.grpc_address, body, headers=brotli)
    assert encoded.headers["grpc-status"] == "12"
    assert "gzip" in encoded.headers["grpc-accept-encoding"]
    flagged = b"\x07" + body[1:]  # a prefix flag that is neither 0 nor 1
    (bad,) = _h2_call(server.grpc_address, flagged)
    assert bad.headers["grpc-status"] == "3", bad  # INVALID_ARGUMENT
    (two,) = _h2_call(server.grpc_address, body + body)  # a unary call with two messages
    assert two.headers["grpc-status"] == "3", two


class _AfterGoaway:
    """The server's bytes for ``h2``, less the PINGs that follow a GOAWAY.

    A worker with more than its share of connections says GOAWAY and PING when a call ends
    (RFC 9113 6.8: the client moves to another worker). ``h2`` counts the connection closed
    at the GOAWAY and raises on the PING, a frame the RFC allows there; gRPC's clients answer
    it. Whole frames only reach ``h2``; a partial one waits for the next read.
    """

    def __init__(self) -> None:
        self._pending = b""
        self._gone = False

    def kept(self, data: bytes) -> bytes:
        self._pending += data
        kept = bytearray()
        while len(self._pending) >= 9:
            end = 9 + int.from_bytes(self._pending[:3], "big")
            if len(self._pending) < end:
                break
            frame, self._pending = self._pending[:end], self._pending[end:]
            kind = frame[3]
            if kind == 7:  # GOAWAY
                self._gone = True
            if not (kind == 6 and self._gone):  # PING after GOAWAY
                kept += frame
        return bytes(kept)


def _frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return (
        len(payload).to_bytes(3, "big")
        + bytes((kind, flags))
        + struct.pack(">I", stream_id)
        + payload
    )


def _raw(address: str, data: bytes) -> bytes:
    """Send ``data`` after the preface and an empty SETTINGS; everything until the server
    closes (or 10 s pass)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(PREFACE + _frame(4, 0, 0, b"") + data)
        received = bytearray()
        try:
            while chunk := sock.recv(65_536):
                received += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return bytes(received)


def _goaway_code(received: bytes) -> int | None:
    position = 0
    while position + 9 <= len(received):
        length = int.from_bytes(received[position : position + 3], "big")
        kind = received[position + 3]
        if kind == GOAWAY:
            return int.from_bytes(received[position + 13 : position + 17], "big")
        position += 9 + length
    return None


HPACK_GET = bytes([0x83, 0x86, 0x84])  # :method POST... as indexed fields (POST, http, /)


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        ("a frame over 16 KiB", _frame(0, 0, 1, b"x" * 20_000), 6),
        ("a header block that is not HPACK", _frame(1, 5, 1, b"\xff\xff\xff\xff\xff"), 9),
        ("CONTINUATION without HEADERS", _frame(9, 4, 1, HPACK_GET), 1),
        ("a stream with an even id", _frame(1, 5, 2, HPACK_GET), 1),
        ("DATA on an idle stream", _frame(0, 1, 9, b"\x00"), 1),
        ("a window over 2^31-1", _frame(8, 0, 0, struct.pack(">I", 2**31 - 1)), 3),
        ("a PING of 3 bytes", _frame(6, 0, 0, b"abc"), 1),
        ("a client PUSH_PROMISE", _frame(5, 4, 1, b"\x00\x00\x00\x02" + HPACK_GET), 1),
        (
            "a header block over 64 KiB",
            _frame(1, 0, 1, HPACK_GET) + _frame(9, 0, 1, b"\x00" * 16_000) * 5,
            11,
        ),
    ],
)
def test_connection_errors_get_goaway_with_the_rfcs_code(
    server: GrpcServer, name: str, data: bytes, code: int
) -> None:
    assert _goaway_code(_raw(server.grpc_address, data)) == code, name


def test_not_http2_at_all_is_closed(server: GrpcServer) -> None:
    host, port = server.grpc_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        while chunk := sock.recv(65_536):  # the server's SETTINGS, its GOAWAY, the close
            received += chunk
    assert _goaway_code(received) == 1


def test_streams_beyond_the_limit_are_refused_and_the_rest_answered(server: GrpcServer) -> None:
    # 1,010 streams opened before any of their data: the last 10 are refused
    # (REFUSED_STREAM, safe to retry); the first 1,000 are answered once their data comes.
    body = _request(np.ones(2, np.float32))
    exchanges = _h2_call(server.grpc_address, body, streams=1_010)
    refused = [e for e in exchanges if e.reset == 7]
    statuses = Counter(
        {**e.headers, **e.trailers}.get("grpc-status") for e in exchanges if e.reset is None
    )
    assert len(refused) == 10
    # Each of the 1,000 is answered, or shed by its model's queue (UNAVAILABLE, with the
    # queue's reason), never lost: 1,000 calls at once can overflow max_queue_size.
    assert sum(statuses.values()) == 1_000
    assert set(statuses) <= {"0", "14"}, statuses
    assert statuses["0"] > 0, statuses


def test_fuzzed_frames_never_kill_a_worker(server: GrpcServer) -> None:
    before = set(worker_pids(server.live))
    valid = _request(np.ones(4, np.float32))
    headers = _frame(1, 4, 1, HPACK_GET + b"\x0f\x10\x10application/grpc")
    rng = random.Random(20261202)
    for _ in range(300):
        sample = bytearray(headers + _frame(0, 1, 1, valid))
        for _ in range(rng.randint(1, 8)):
            sample[rng.randrange(len(sample))] = rng.randrange(256)
        if rng.random() < 0.3:
            sample = sample[: rng.randrange(len(sample))]
        _raw_quick(server.grpc_address, bytes(sample))
    assert set(worker_pids(server.live)) == before
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = channel.unary_unary(INFER, request_serializer=None, response_deserializer=None)
        answer = pb.ModelInferResponse.FromString(stub(valid[5:], timeout=30))
    assert answer.model_name == "echo"


def _raw_quick(address: str, data: bytes) -> None:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(PREFACE + _frame(4, 0, 0, b"") + data)
        sock.settimeout(0.2)  # a reply or not: the next sample goes on either way
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            sock.recv(65_536)


def _whoami(channel: grpc.Channel) -> int:
    request = pb.ModelInferRequest(model_name="whoami")
    request.inputs.add(name="x", datatype="FP32", shape=[1])
    request.raw_input_contents.append(np.zeros(1, "<f4").tobytes())
    call = channel.unary_unary(
        INFER,
        request_serializer=pb.ModelInferRequest.SerializeToString,
        response_deserializer=pb.ModelInferResponse.FromString,
    )
    answer = call(request, timeout=30)
    return int(np.frombuffer(answer.raw_output_contents[0], "<i8")[0])


def test_connections_spread_evenly_over_the_workers(server: GrpcServer) -> None:
    # 16 connections opened at once land on the workers by the kernel's hash (8/8 one time
    # in five); a worker holding clearly more sends GOAWAY and the client reconnects, until
    # the workers hold 8 each. Each channel keeps its own connection (no subchannel pool).
    options = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.insecure_channel(server.grpc_address, options=options) for _ in range(16)]
    try:
        deadline = time.monotonic() + 60
        while True:
            split = Counter(_whoami(channel) for channel in channels)
            if sorted(split.values()) == [8, 8]:
                break
            assert time.monotonic() < deadline, f"still {dict(split)} after 60 s"
    finally:
        for channel in channels:
            channel.close()
