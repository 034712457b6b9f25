"""gRPC over :mod:`~servinglib.grpc_front.http2`: methods, messages, deadlines, statuses.

A call is routed by its ``:path`` to a :class:`Method`; its messages (a 5-byte prefix,
then the protobuf, gzip or deflate compressed when ``grpc-encoding`` says so) are parsed
with the method's parser and handed to the method's behaviour with a :class:`CallContext`
(the part of grpcio's ``ServicerContext`` servinglib's servicers use). The answer goes
back as HEADERS, DATA and trailers (``grpc-status``, ``grpc-message`` percent-encoded,
the context's trailing metadata); a call refused before any answer gets one
trailers-only HEADERS frame, as the gRPC protocol says.

What a client gets wrong is answered, never fatal: an unknown method is UNIMPLEMENTED, an
unsupported ``grpc-encoding`` UNIMPLEMENTED (naming those accepted), a message over the
limit RESOURCE_EXHAUSTED, a broken prefix or compressed data INVALID_ARGUMENT, a request
that is not gRPC (``content-type``) HTTP 415. A behaviour that raises is INTERNAL and
logged; a call the client resets is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc

from servinglib.grpc_front.http2 import Http2Connection
from servinglib.grpc_front.http2_frames import NO_ERROR, Stream
from servinglib.grpc_front.rpc_headers import (
    ACCEPTED_ENCODINGS,
    CONTENT_TYPE,
    GZIP_RESPONSE_HEADERS,
    RESPONSE_HEADERS,
    STATUS_200,
    UNSUPPORTED_MEDIA,
    Head,
    literal,
    parse_head,
    trailer_block,
)

__all__ = ["AbortedError", "CallContext", "GrpcApplication", "Method"]

log = logging.getLogger("servinglib.grpc")

PREFIX_BYTES = 5
STREAM_BACKLOG = 64  # messages read ahead on one stream before its credit is held back
_HEADS_KEPT = 256  # parsed request heads remembered per application


class AbortedError(Exception):
    """Raised by :meth:`CallContext.abort`: the call ends with this status."""

    def __init__(self, code: int, message: str, trailers: tuple[tuple[str, str], ...]) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.trailers = trailers


class CallContext:
    """What a behaviour may ask of its call (grpcio's ``ServicerContext``, in part)."""

    __slots__ = ("_deadline", "_metadata", "compress", "trailers")

    def __init__(self, metadata: tuple[tuple[str, Any], ...], deadline: float | None) -> None:
        self._metadata = metadata
        self._deadline = deadline
        self.trailers: tuple[tuple[str, str], ...] = ()
        self.compress = False

    def invocation_metadata(self) -> tuple[tuple[str, Any], ...]:
        """The call's metadata (``-bin`` values as bytes)."""
        return self._metadata

    def time_remaining(self) -> float | None:
        """Seconds until the call's deadline (None without one)."""
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - asyncio.get_running_loop().time())

    async def abort(
        self, code: grpc.StatusCode, details: str, trailing_metadata: Iterable[Any] = ()
    ) -> NoReturn:
        """End the call with ``code`` and ``details``."""
        raise AbortedError(code.value[0], details, tuple(trailing_metadata))

    def set_trailing_metadata(self, metadata: Iterable[tuple[str, str]]) -> None:
        """Trailers sent with the status."""
        self.trailers = tuple(metadata)

    def set_compression(self, compression: grpc.Compression) -> None:
        """Compress the answer (gzip, when the client accepts it)."""
        self.compress = compression != grpc.Compression.NoCompression


@dataclass(frozen=True)
class Method:
    """One RPC: how its messages parse and serialize, and what answers it.

    ``behaviour(request, context)`` is a coroutine for a unary answer, an async
    iterator of answers when ``server_streaming``; with ``client_streaming`` it takes an
    async iterator of requests.
    """

    behaviour: Callable[..., Any]
    parse: Callable[[bytes], Any]
    serialize: Callable[[Any], bytes]
    client_streaming: bool = False
    server_streaming: bool = False


class _Call:
    """A call in progress on one stream."""

    __slots__ = ("context", "head", "method", "queue", "started", "task")

    def __init__(self, head: Head, method: Method, context: CallContext) -> None:
        self.head = head
        self.method = method
        self.context = context
        self.task: asyncio.Future[None] | None = None
        self.queue: asyncio.Queue[Any] | None = None  # requests of a client stream
        self.started = False  # response headers sent


class _RefusedError(Exception):
    """A message that cannot be read: the call ends with ``code``."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code.value[0]


class GrpcApplication:
    """Calls on HTTP/2 streams, answered by ``methods`` (keyed by path,
    ``/package.Service/Method``). ``max_message_bytes``: the largest request message,
    before and after decompression."""

    def __init__(self, methods: dict[str, Method], max_message_bytes: int) -> None:
        self._methods = methods
        self._limit = max_message_bytes
        self._heads: dict[tuple[tuple[str, str], ...], Head] = {}
        self.calls: set[asyncio.Future[None]] = set()  # behaviours running (for a drain)

    # -- StreamApplication ---------------------------------------------------------------

    def stream_started(self, connection: Http2Connection, stream: Stream) -> None:
        head = self._heads.get(stream.headers)
        if head is None:
            head = parse_head(stream.headers)
            if len(self._heads) >= _HEADS_KEPT:
                self._heads.clear()
            self._heads[stream.headers] = head
        if not head.grpc:
            connection.send_headers(stream, UNSUPPORTED_MEDIA, end_stream=True)
            return
        method = self._methods.get(head.path)
        if method is None:
            self._refuse(connection, stream, 12, f"unknown method {head.path}")
            return
        if head.encoding not in ("identity", "gzip", "deflate"):
            self._refuse(
                connection,
                stream,
                12,
                f"grpc-encoding {head.encoding!r} is not supported; use one of "
                f"{ACCEPTED_ENCODINGS}",
            )
            return
        deadline = None
        if head.timeout_s is not None:
            deadline = asyncio.get_running_loop().time() + head.timeout_s
        call = _Call(head, method, CallContext(head.metadata, deadline))
        stream.app_state = call
        if method.client_streaming:
            call.queue = asyncio.Queue()
            requests = self._requests(connection, stream, call)
            self._start(call, self._streamed(connection, stream, call, requests))

    def stream_data(self, connection: Http2Connection, stream: Stream) -> None:
        call = stream.app_state
        if call is None:
            return
        try:
            if call.queue is not None:
                for message in self._messages(stream, call.head):
                    call.queue.put_nowait(call.method.parse(message))
                if stream.ended:
                    call.queue.put_nowait(None)
                elif call.queue.qsize() >= STREAM_BACKLOG:
                    stream.paused = True
                return
            if len(stream.body) > self._limit + PREFIX_BYTES:
                too_large = self._too_large(len(stream.body))
                raise _RefusedError(grpc.StatusCode.RESOURCE_EXHAUSTED, too_large)
            if not stream.ended:
                return
            messages = list(self._messages(stream, call.head))
            if len(messages) != 1 or stream.body:
                raise _RefusedError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"a unary call carries one whole message, not {len(messages)} "
                    f"(and {len(stream.body)} bytes of a broken one); check the client",
                )
        except _RefusedError as e:
            stream.app_state = None
            if call.task is not None:
                call.task.cancel()
            self._refuse(connection, stream, e.code, str(e), call.started)
            if not stream.ended:
                connection.reset(stream.id, NO_ERROR)  # stop sending (RFC 9113 8.1)
            return
        request = call.method.parse(messages[0])
        if call.method.server_streaming:
            responses = call.method.behaviour(request, call.context)
            self._start(call, self._streamed(connection, stream, call, responses, coroutine=False))
        else:
            self._start(call, self._unary(connection, stream, call, request))

    def stream_reset(self, connection: Http2Connection, stream: Stream) -> None:
        call = stream.app_state
        stream.app_state = None
        if call is not None and call.task is not None:
            call.task.cancel()

    # -- calls ------------------------------------------------------------------------------

    def _start(self, call: _Call, work: Any) -> None:
        task = asyncio.ensure_future(work)
        call.task = task
        self.calls.add(task)
        task.add_done_callback(self.calls.discard)

    async def _unary(
        self, connection: Http2Connection, stream: Stream, call: _Call, request: Any
    ) -> None:
        context = call.context
        try:
            response = await call.method.behaviour(request, context)
            body = call.method.serialize(response)
        except AbortedError as e:
            self._refuse(connection, stream, e.code, e.message, trailers=e.trailers)
            return
        except asyncio.CancelledError:
            return
        except Exception:
            log.exception("gRPC: %s failed", call.head.path)
            self._refuse(connection, stream, 13, "the server failed to answer")
            return
        headers = RESPONSE_HEADERS
        if context.compress and call.head.gzip_ok:
            message = _gzip(body)
            headers = GZIP_RESPONSE_HEADERS
        else:
            message = b"\x00" + len(body).to_bytes(4, "big") + body
        connection.answer(stream, headers, message, trailer_block(0, "", context.trailers))

    async def _streamed(
        self,
        connection: Http2Connection,
        stream: Stream,
        call: _Call,
        requests_or_responses: Any,
        coroutine: bool = True,
    ) -> None:
        """A streaming answer: headers, a message per answer, then the status."""
        context = call.context
        responses: AsyncIterator[Any] = (
            call.method.behaviour(requests_or_responses, context)
            if coroutine
            else requests_or_responses
        )
        try:
            async for response in responses:
                if not call.started:
                    call.started = True
                    connection.send_headers(stream, RESPONSE_HEADERS)
                body = call.method.serialize(response)
                connection.send_data(stream, b"\x00" + len(body).to_bytes(4, "big") + body)
        except AbortedError as e:
            self._refuse(connection, stream, e.code, e.message, call.started, e.trailers)
            return
        except asyncio.CancelledError:
            return
        except _RefusedError as e:
            self._refuse(connection, stream, e.code, str(e), call.started)
            if not stream.ended:
                connection.reset(stream.id, NO_ERROR)  # stop sending (RFC 9113 8.1)
            return
        except Exception:
            log.exception("gRPC: %s failed", call.head.path)
            self._refuse(connection, stream, 13, "the server failed to answer", call.started)
            return
        if not call.started:
            connection.send_headers(stream, RESPONSE_HEADERS)
        connection.send_trailers(stream, trailer_block(0, "", context.trailers))

    async def _requests(
        self, connection: Http2Connection, stream: Stream, call: _Call
    ) -> AsyncIterator[Any]:
        """The requests of a client stream, as they come."""
        queue = call.queue
        assert queue is not None
        while True:
            request = await queue.get()
            if stream.paused and queue.qsize() < STREAM_BACKLOG // 2:
                connection.give_stream_credit(stream)
            if request is None:
                return
            yield request

    # -- messages -------------------------------------------------------------------------

    def _messages(self, stream: Stream, head: Head) -> Iterable[bytes]:
        """Every whole message in ``stream.body`` (taken out of it), decompressed.

        Raises:
            _RefusedError: a message over the limit, or compressed data that does not read.
        """
        body = stream.body
        while len(body) >= PREFIX_BYTES:
            flag = body[0]
            size = int.from_bytes(body[1:PREFIX_BYTES], "big")
            if size > self._limit:
                raise _RefusedError(grpc.StatusCode.RESOURCE_EXHAUSTED, self._too_large(size))
            if len(body) < PREFIX_BYTES + size:
                return
            message = bytes(body[PREFIX_BYTES : PREFIX_BYTES + size])
            del body[: PREFIX_BYTES + size]
            if flag == 0:
                yield message
            elif flag == 1:
                yield self._decompressed(message, head.encoding)
            else:
                raise _RefusedError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"a message prefix flag of {flag} (0: plain, 1: compressed); check the client",
                )

    def _decompressed(self, message: bytes, encoding: str) -> bytes:
        if encoding == "identity":
            raise _RefusedError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "a compressed message without grpc-encoding; set grpc-encoding",
            )
        window = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
        inflater = zlib.decompressobj(window)
        try:
            plain = inflater.decompress(message, self._limit + 1)
        except zlib.error as e:
            raise _RefusedError(
                grpc.StatusCode.INVALID_ARGUMENT, f"a {encoding} message does not inflate ({e})"
            ) from e
        if len(plain) > self._limit or inflater.unconsumed_tail:
            raise _RefusedError(
                grpc.StatusCode.RESOURCE_EXHAUSTED, self._too_large(len(plain), inflated=True)
            )
        return plain

    def _too_large(self, size: int, inflated: bool = False) -> str:
        what = "inflates to over" if inflated else f"of {size} bytes is over"
        return (
            f"a request message {what} the limit of {self._limit} bytes "
            "(server.max_request_body_bytes); send smaller requests or raise the limit"
        )

    def _refuse(
        self,
        connection: Http2Connection,
        stream: Stream,
        code: int,
        message: str,
        started: bool = False,
        trailers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """End the call with a status: trailers after an answer's headers, else
        trailers-only."""
        block = trailer_block(code, message, trailers)
        if code == 12:
            block += literal("grpc-accept-encoding", ACCEPTED_ENCODINGS)
        if started:
            connection.send_trailers(stream, block)
        else:
            connection.send_headers(stream, STATUS_200 + CONTENT_TYPE + block, end_stream=True)


def _gzip(body: bytes) -> bytes:
    compressor = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    packed = compressor.compress(body) + compressor.flush()
    return b"\x01" + len(packed).to_bytes(4, "big") + packed
