"""gthread's connection hygiene: a thread only ever sees a request whose head has arrived.

gunicorn's gthread worker hands a new connection to a thread, which then reads the request
head with blocking reads: a client that sends its head one byte at a time (slowloris) holds
that thread for as long as it likes, and a few dozen such clients hold all of them. Here
the worker's main thread reads request heads itself, without blocking, from every new or
kept-alive connection, and gives a connection to the thread pool only once its head is
complete (the bytes read so far go to the parser). Like the asyncio worker:

* a connection whose head is not complete ``server.header_timeout_s`` after it opened (or
  after a kept-alive connection's next request began) is closed;
* at ``server.max_connections`` (kept below the file limit) a new connection closes the
  oldest idle one (still reading its head, or kept alive between requests), or itself when
  every connection is busy, so idle sockets can never lock out real clients.

TLS and HTTP/2 by prior knowledge read their first bytes on the thread, as gunicorn does.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import time
from collections import deque
from functools import partial
from typing import Any

import orjson
from gunicorn.http2 import negotiation
from gunicorn.workers.gthread import STOP_KEEPALIVE_LINGER, TConn, ThreadWorker

__all__ = ["GuardedThreadWorker", "json_refusal"]

_READ_BYTES = 65536


class GuardedThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gthread whose threads never wait for a request head; a bounded set of connections."""

    header_timeout_s = 10.0  # replaced by server.header_timeout_s once the worker is built

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_open: int = self.cfg.worker_connections
        # gthread stops accepting at worker_connections; this worker keeps accepting at the
        # cap and makes room instead, so the loop's check must never trip first.
        self.worker_connections = self.max_open + 1
        self.heads: deque[TConn] = deque()  # reading their heads, oldest first
        self._stopping_at: float | None = None

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
        conn = TConn(self.cfg, sock, client, listener.getsockname())  # non-blocking
        if self.nr_conns >= self.max_open and not self._evict_oldest_idle():
            conn.close()  # every other connection is busy: refuse this one
            return
        self.nr_conns += 1
        if self._guarded(conn):
            self._read_head(conn)
        else:
            sock.setblocking(True)
            self.enqueue_req(conn)

    def on_client_socket_readable(self, conn: TConn, client: Any) -> None:
        """A kept-alive connection's next request began: read its head here first."""
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        if self._guarded(conn):
            self._read_head(conn)
        else:
            self.enqueue_req(conn)

    def _read_head(self, conn: TConn) -> None:
        conn.head = bytearray()
        conn.head_deadline = time.monotonic() + self.header_timeout_s
        self.heads.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._head_readable, conn))
        self._head_readable(conn, conn.sock)  # often here already

    def _head_readable(self, conn: TConn, _sock: Any) -> None:
        try:
            data = conn.sock.recv(_READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # closed before its head arrived
            self._drop(conn)
            return
        head: bytearray = conn.head
        head += data
        tail = head[-(len(data) + 3) :]
        if b"\r\n\r\n" in tail or b"\n\n" in tail:
            self._stop_reading(conn)
            conn.data_ready = True  # no wait for data on the thread
            self.enqueue_req(conn)
        elif len(head) > self._max_head_bytes():
            self._refuse(conn, "431 Request Header Fields Too Large", len(head))

    def _max_head_bytes(self) -> int:
        fields = (self.cfg.limit_request_field_size + 2) * (self.cfg.limit_request_fields + 2)
        return int(self.cfg.limit_request_line + fields)

    def _refuse(self, conn: TConn, status: str, size: int) -> None:
        answer = json_refusal(status, f"the request head is larger than {size - 1} bytes")
        with contextlib.suppress(OSError):  # best effort: a client not reading gets nothing
            conn.sock.send(answer)
        self._drop(conn)

    def _stop_reading(self, conn: TConn) -> None:
        self.poller.unregister(conn.sock)
        self.heads.remove(conn)

    def _drop(self, conn: TConn) -> None:
        self._stop_reading(conn)
        self.nr_conns -= 1
        conn.close()

    def _evict_oldest_idle(self) -> bool:
        """Close the oldest idle connection (reading its head, or kept alive), if any."""
        if self.heads:
            self._drop(self.heads[0])
            return True
        if self.keepalived_conns:
            conn = self.keepalived_conns.popleft()
            self.poller.unregister(conn.sock)
            self.nr_conns -= 1
            conn.close()
            return True
        return False

    def handle(self, conn: TConn) -> Any:
        """Serve the connection on a thread, its head (read already) handed to the parser."""
        head = getattr(conn, "head", None)
        if head:
            conn.head = None
            conn.init()  # creates the parser of a new connection; nothing else
            conn.parser.unreader.unread(bytes(head))
        return super().handle(conn)

    def murder_pending(self) -> None:
        """gthread's timeouts, and heads that took longer than ``header_timeout_s``.

        Once the worker stops, a connection whose head has not arrived is closed after
        ``STOP_KEEPALIVE_LINGER`` (as gthread does with kept-alive connections), so that
        slow clients cannot hold a stopping worker for ``header_timeout_s``.
        """
        super().murder_pending()
        now = time.monotonic()
        while self.heads and self.heads[0].head_deadline <= now:
            self._drop(self.heads[0])
        if self.alive:
            return
        if self._stopping_at is None:
            self._stopping_at = now
        if now - self._stopping_at >= STOP_KEEPALIVE_LINGER:
            while self.heads:
                self._drop(self.heads[0])


def json_refusal(status: str, message: str) -> bytes:
    """A complete HTTP/1.1 answer that closes the connection: ``{"error": message}``."""
    body = orjson.dumps({"error": message})
    head = (
        f"HTTP/1.1 {status}\r\nServer: gunicorn\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body
