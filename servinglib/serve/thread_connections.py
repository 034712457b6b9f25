"""gthread's connection hygiene: a thread only ever sees a request that has fully arrived.

gunicorn's gthread worker hands a new connection to a thread, which then reads the request
with blocking reads: a client that sends its head or its body one byte at a time
(slowloris) holds that thread for as long as it likes, and a few dozen such clients hold
all of them. Here the worker's main thread reads each request itself, head and body,
without blocking, from every new or kept-alive connection, and gives a connection to the
thread pool only once the request is complete (the bytes read so far go to the parser;
:mod:`servinglib.serve.request_framing` finds the end). Like the asyncio worker:

* a connection whose head is not complete ``server.header_timeout_s`` after it opened (or
  after a kept-alive connection's next request began) is closed;
* a body not complete ``server.body_timeout_s`` after its head (plus a second for every
  ``server.body_min_bytes_per_s`` bytes received) is answered 408 and its connection
  closed (:mod:`servinglib.serve.body_timeout`);
* at ``server.max_connections`` (kept below the file limit) a new connection closes the
  oldest one that is idle or still sending its request (kept alive between requests,
  reading its head or its body), or itself when every connection is busy, so idle and
  slow sockets can never lock out real clients;
* an inference request that would wait longer for a thread than its deadline allows is
  answered 503 at once (:mod:`servinglib.serve.thread_admission`); the wait of those
  admitted counts against their deadline (``environ["servinglib.queued_s"]``).

TLS and HTTP/2 by prior knowledge read their first bytes on the thread, as gunicorn does.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import orjson
from gunicorn.http2 import negotiation
from gunicorn.workers.gthread import STOP_KEEPALIVE_LINGER, TConn, ThreadWorker

from servinglib.http.wsgi import QUEUED_S
from servinglib.serve.body_timeout import BodyTimeout
from servinglib.serve.request_framing import RequestFraming
from servinglib.serve.thread_admission import ThreadAdmission, inference_model

__all__ = ["GuardedThreadWorker", "json_refusal"]

_READ_BYTES = 65536
_SCAN_EVERY_S = 0.25  # how often the main thread looks for late heads and bodies
_SHED = "503 Service Unavailable"
_LINGER_S = 2.0  # how long a closing connection is drained (gunicorn's close_graceful)


class GuardedThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gthread whose threads never wait for a request head; a bounded set of connections."""

    header_timeout_s = 10.0  # replaced by server.header_timeout_s once the worker is built
    body_timeout = BodyTimeout()  # replaced by server.body_timeout_s and its rate
    max_body_bytes = 8 * 1024 * 1024  # replaced by server.max_request_body_bytes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_open: int = self.cfg.worker_connections
        # gthread stops accepting at worker_connections; this worker keeps accepting at the
        # cap and makes room instead, so the loop's check must never trip first.
        self.worker_connections = self.max_open + 1
        self.heads: deque[TConn] = deque()  # reading their requests, oldest first
        self.lingering: deque[tuple[float, socket.socket]] = deque()  # closing, by deadline
        self.admission = ThreadAdmission(self.cfg.threads)
        self._waits = threading.local()  # per thread: how long its request waited
        self._stopping_at: float | None = None
        self._next_scan = 0.0

    def with_queue_wait(self, app: Callable[..., Iterable[bytes]]) -> Callable[..., Any]:
        """``app`` (WSGI), told in its environ how long each request waited for a thread.

        An answer with ``Connection: close`` (a shed request's) closes the connection:
        gunicorn drops that header as hop-by-hop and would keep the connection alive.
        """
        waits = self._waits

        def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            environ[QUEUED_S] = getattr(waits, "queued_s", 0.0)

            def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                waits.shed = status.startswith("503")
                if any(k.lower() == "connection" and v.lower() == "close" for k, v in headers):
                    close = getattr(getattr(start_response, "__self__", None), "force_close", None)
                    if close is not None:
                        close()
                return start_response(status, headers, exc_info)

            return app(environ, start)

        return wsgi

    def _guarded(self, conn: TConn) -> bool:
        return not self.cfg.is_ssl and not negotiation.prior_knowledge_allowed(
            self.cfg, conn.client
        )

    def accept(self, listener: Any) -> None:
        """Accept one connection and start reading its head; make room at the cap."""
        try:
            sock, client = listener.accept()
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE):  # out of files: free one
                self._evict_oldest_idle()
                return
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        conn = _Conn(self.cfg, sock, client, listener.getsockname())  # non-blocking
        conn.linger = self._linger
        if self.nr_conns >= self.max_open and not self._evict_oldest_idle():
            conn.close()  # every other connection is busy: refuse this one
            return
        self.nr_conns += 1
        if self._guarded(conn):
            self._read_request(conn)
        else:
            sock.setblocking(True)
            self.enqueue_req(conn)

    def on_client_socket_readable(self, conn: TConn, client: Any) -> None:
        """A kept-alive connection's next request began: read it here first."""
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        if self._guarded(conn):
            self._read_request(conn)
        else:
            self.enqueue_req(conn)

    def enqueue_req(self, conn: TConn) -> None:
        """Queue the connection for a thread (counted as waiting for one)."""
        if getattr(conn, "arrived", None) is None:
            conn.arrived = time.monotonic()
            self.admission.queued()
        super().enqueue_req(conn)

    def _read_request(self, conn: TConn) -> None:
        conn.head = bytearray()
        conn.framing = None
        conn.head_deadline = time.monotonic() + self.header_timeout_s
        self.heads.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._request_readable, conn))
        self._request_readable(conn, conn.sock)  # often here already

    def _request_readable(self, conn: TConn, _sock: Any) -> None:
        try:
            data = conn.sock.recv(_READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # closed before its request arrived
            self._drop(conn)
            return
        buffer: bytearray = conn.head
        buffer += data
        framing: RequestFraming | None = conn.framing
        if framing is None:
            tail = buffer[-(len(data) + 3) :]
            if b"\r\n\r\n" not in tail and b"\n\n" not in tail:
                if len(buffer) > self._max_head_bytes():
                    self._refuse(conn, "431 Request Header Fields Too Large", len(buffer))
                return
            framing = conn.framing = RequestFraming.of_head(buffer)
            conn.body_started = time.monotonic()
            if framing.expects_continue and not framing.complete(buffer):
                with contextlib.suppress(OSError):
                    conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
                framing.answer_continue(buffer)  # so gunicorn does not send a second one
        if framing.complete(buffer) or framing.body_bytes(buffer) > self.max_body_bytes:
            self._stop_reading(conn)
            conn.data_ready = True  # no wait for data on the thread
            self._admit(conn, framing)

    def _admit(self, conn: TConn, framing: RequestFraming) -> None:
        """Queue the complete request for a thread, or shed it: the wait would be too long."""
        conn.arrived = time.monotonic()
        conn.model = model = inference_model(framing.path, conn.head[framing.head_size :])
        if model is None or self.admission.admit(model):
            super().enqueue_req(conn)
            return
        wait_ms = self.admission.expected_wait_s() * 1000
        answer = json_refusal(
            _SHED,
            f"the server is overloaded: this request would wait about {wait_ms:.0f} ms for a "
            "thread, more than its deadline allows; retry later or another replica",
            (("Retry-After", "1"),),
        )
        with contextlib.suppress(OSError):
            conn.sock.send(answer)
        self.nr_conns -= 1
        conn.close()
        self.shed_before_thread(model, framing.path.decode("latin-1"))

    def shed_before_thread(self, model: str, path: str) -> None:
        """Told of each request refused before it waited for a thread (metrics, log)."""

    def _max_head_bytes(self) -> int:
        fields = (self.cfg.limit_request_field_size + 2) * (self.cfg.limit_request_fields + 2)
        return int(self.cfg.limit_request_line + fields)

    def _refuse(self, conn: TConn, status: str, size: int) -> None:
        message = f"the request head is larger than {size - 1} bytes"
        self._answer_and_drop(conn, json_refusal(status, message))

    def _answer_and_drop(self, conn: TConn, answer: bytes) -> None:
        with contextlib.suppress(OSError):  # best effort: a client not reading gets nothing
            conn.sock.send(answer)
        self._drop(conn)

    def _late_body(self, conn: TConn) -> None:
        received = conn.framing.body_bytes(conn.head)
        self._answer_and_drop(
            conn, json_refusal("408 Request Timeout", self.body_timeout.message(received))
        )

    def _stop_reading(self, conn: TConn) -> None:
        self.poller.unregister(conn.sock)
        self.heads.remove(conn)

    def _drop(self, conn: TConn) -> None:
        self._stop_reading(conn)
        self.nr_conns -= 1
        conn.close()

    def _evict_oldest_idle(self) -> bool:
        """Close the oldest idle connection (reading its request, or kept alive), if any."""
        if self.heads:
            oldest = self.heads[0]
            if oldest.framing is not None:  # its body was arriving: tell the client why
                self._late_body(oldest)
            else:
                self._drop(oldest)
            return True
        if self.keepalived_conns:
            conn = self.keepalived_conns.popleft()
            self.poller.unregister(conn.sock)
            self.nr_conns -= 1
            conn.close()
            return True
        return False

    def handle(self, conn: TConn) -> Any:
        """Serve the connection on a thread, its request (read already) handed to the parser."""
        arrived = getattr(conn, "arrived", None)
        if arrived is None:  # the next request of a lingering connection: no wait
            self._waits.queued_s = 0.0
            return super().handle(conn)
        conn.arrived = None
        started = self.admission.started()
        self._waits.queued_s = max(0.0, started - arrived)
        self._waits.shed = False
        try:
            head = getattr(conn, "head", None)
            if head:
                conn.head = None
                conn.init()  # creates the parser of a new connection; nothing else
                conn.parser.unreader.unread(bytes(head))
            return super().handle(conn)
        finally:
            self.admission.finished(started, getattr(conn, "model", None) or "", self._waits.shed)

    def _linger(self, sock: socket.socket) -> None:
        """gunicorn's graceful close, without blocking the main thread.

        After the last answer on a connection, gthread half-closes it and reads until the
        client closes (so unread request bytes never turn the close into a reset), with a
        2 s limit, on the main thread: every slow client stalled every other connection
        meanwhile. Here the poller waits for the client's end instead.
        """
        try:
            sock.shutdown(socket.SHUT_WR)
            sock.setblocking(False)
            self.poller.register(sock, selectors.EVENT_READ, partial(self._drain, sock))
        except (OSError, ValueError, KeyError):
            sock.close()
            return
        self.lingering.append((time.monotonic() + _LINGER_S, sock))

    def _drain(self, sock: socket.socket, _fileobj: Any) -> None:
        try:
            if sock.recv(_READ_BYTES):
                return  # discarded; the client has not closed yet
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self._end_linger(sock)

    def _end_linger(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError, KeyError):
            self.poller.unregister(sock)
        sock.close()

    def murder_pending(self) -> None:
        """gthread's timeouts, heads past ``header_timeout_s``, bodies past their limit.

        Once the worker stops, a connection whose request has not arrived is closed after
        ``STOP_KEEPALIVE_LINGER`` (as gthread does with kept-alive connections), so that
        slow clients cannot hold a stopping worker for their timeouts.
        """
        super().murder_pending()
        now = time.monotonic()
        while self.lingering and (self.lingering[0][0] <= now or self.lingering[0][1].fileno() < 0):
            self._end_linger(self.lingering.popleft()[1])
        if now >= self._next_scan:
            self._next_scan = now + _SCAN_EVERY_S
            for conn in list(self.heads):
                framing: RequestFraming | None = conn.framing
                if framing is None:
                    if conn.head_deadline <= now:
                        self._drop(conn)
                elif now >= self.body_timeout.deadline(
                    conn.body_started, framing.body_bytes(conn.head)
                ):
                    self._late_body(conn)
        if self.alive:
            return
        if self._stopping_at is None:
            self._stopping_at = now
        if now - self._stopping_at >= STOP_KEEPALIVE_LINGER:
            while self.heads:
                self._drop(self.heads[0])


def json_refusal(status: str, message: str, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A complete HTTP/1.1 answer that closes the connection: ``{"error": message}``."""
    body = orjson.dumps({"error": message})
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers)
    head = (
        f"HTTP/1.1 {status}\r\nServer: gunicorn\r\nConnection: close\r\n{extra}"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class _Conn(TConn):  # type: ignore[misc]
    """gthread's connection, closed gracefully by the worker's poller (see ``_linger``)."""

    linger: Callable[[socket.socket], None] | None = None

    def close(self, graceful: bool = False) -> None:
        if graceful and self.linger is not None:
            self.sock.setblocking(True)  # as TConn.close does; _linger sets it back
            self.linger(self.sock)
            return
        super().close(graceful)
