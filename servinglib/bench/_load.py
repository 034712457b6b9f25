"""The load generator: threads, each with one keep-alive HTTP/1.1 connection.

Closed loop: ``concurrency`` threads each send their next request as soon as the last one
is answered. Open loop: arrivals at Poisson times of a given rate; a request's latency
counts from its scheduled time, so a server that falls behind shows it (no coordinated
omission). The clock is ``time.perf_counter``; a request that could not be sent at all
(refused connection, reset) counts as status 0.
"""

from __future__ import annotations

import itertools
import random
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from servinglib.bench._payloads import Prepared

__all__ = ["Samples", "closed_loop", "open_loop"]

Progress = Callable[["Samples"], None]


@dataclass
class Samples:
    """What one measured window recorded."""

    latencies_s: list[float] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, latency_s: float, status: int) -> None:
        with self.lock:
            self.latencies_s.append(latency_s)
            self.statuses.append(status)


class _Client:
    """One keep-alive HTTP/1.1 connection on a raw socket; reconnects after an error.

    Each request's bytes (request line, headers, body) are built once and reused; the
    answer is read by its Content-Length (or chunks). Cheaper per request than
    ``http.client``, so the client takes less of the CPU it shares with the server.
    """

    def __init__(self, url: str, timeout_s: float) -> None:
        parts = urlsplit(url)
        self._address = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._host = f"{self._address[0]}:{self._address[1]}".encode()
        self._timeout_s = timeout_s
        self._socket: socket.socket | None = None
        self._buffer = b""
        self._wire: dict[int, bytes] = {}

    def _bytes(self, request: Prepared) -> bytes:
        wire = self._wire.get(id(request))
        if wire is None:
            headers = "".join(f"{k}: {v}\r\n" for k, v in request.headers.items())
            head = (
                f"POST {request.path} HTTP/1.1\r\nHost: {self._host.decode()}\r\n"
                f"Content-Length: {len(request.body)}\r\n{headers}\r\n"
            )
            wire = self._wire[id(request)] = head.encode() + request.body
        return wire

    def send(self, request: Prepared) -> int:
        try:
            if self._socket is None:
                self._socket = socket.create_connection(self._address, self._timeout_s)
                self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._buffer = b""
            self._socket.sendall(self._bytes(request))
            return self._answer(self._socket)
        except (OSError, ValueError):
            self.close()
            return 0

    def _fill(self, sock: socket.socket) -> None:
        chunk = sock.recv(262144)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self._buffer += chunk

    def _answer(self, sock: socket.socket) -> int:
        while b"\r\n\r\n" not in self._buffer:
            self._fill(sock)
        head, _, self._buffer = self._buffer.partition(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        found = _LENGTH.search(lower)
        if found is not None:
            length = int(found[1])
            while len(self._buffer) < length:
                self._fill(sock)
            self._buffer = self._buffer[length:]
        elif b"transfer-encoding: chunked" in lower:
            while b"\r\n0\r\n\r\n" not in self._buffer and not self._buffer.startswith(
                b"0\r\n\r\n"
            ):
                self._fill(sock)
            self._buffer = self._buffer.split(b"0\r\n\r\n", 1)[1]
        if b"connection: close" in lower:
            self.close()
        return status

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


_LENGTH = re.compile(rb"content-length:\s*(\d+)")


Sender = Callable[[Prepared], int]


def _senders(
    url: str, count: int, timeout_s: float, grpc: bool
) -> list[tuple[Sender, Callable[[], None]]]:
    if grpc:
        from servinglib.bench._grpc import GrpcSender

        made = [GrpcSender(url, timeout_s) for _ in range(count)]
        return [(s.send, s.close) for s in made]
    clients = [_Client(url, timeout_s) for _ in range(count)]
    return [(c.send, c.close) for c in clients]


def _watch(samples: Samples, stop: threading.Event, progress: Progress | None) -> None:
    while progress is not None and not stop.wait(0.5):
        progress(samples)


def closed_loop(
    url: str,
    requests: Sequence[Prepared],
    concurrency: int,
    *,
    seconds: float,
    count: int = 0,
    warmup_s: float = 0.0,
    timeout_s: float = 30.0,
    grpc: bool = False,
    progress: Progress | None = None,
) -> Samples:
    """``concurrency`` senders for ``warmup_s`` (not recorded), then for ``seconds`` (or
    until ``count`` requests were answered, when ``count`` > 0)."""
    senders = _senders(url, concurrency, timeout_s, grpc)
    samples, measured = Samples(), threading.Event()
    stop = threading.Event()
    taken = itertools.count()

    def work(index: int) -> None:
        send = senders[index][0]
        for n in itertools.count(index):
            if stop.is_set():
                return
            request = requests[n % len(requests)]
            started = time.perf_counter()
            status = send(request)
            if measured.is_set():
                samples.add(time.perf_counter() - started, status)
                if count and next(taken) + 1 >= count:
                    stop.set()

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    stop.wait(warmup_s)
    watcher = threading.Thread(target=_watch, args=(samples, stop, progress), daemon=True)
    started = time.perf_counter()
    measured.set()
    watcher.start()
    stop.wait(None if count else seconds)
    samples.seconds = time.perf_counter() - started
    stop.set()
    for thread in threads:
        thread.join()
    for _, close in senders:
        close()
    return samples


def open_loop(
    url: str,
    requests: Sequence[Prepared],
    rate: float,
    *,
    seconds: float,
    max_in_flight: int = 64,
    timeout_s: float = 30.0,
    grpc: bool = False,
    progress: Progress | None = None,
    seed: int = 0,
) -> Samples:
    """Poisson arrivals at ``rate`` per second for ``seconds``; at most ``max_in_flight``
    requests are outstanding (a later arrival waits, and its wait counts as latency)."""
    rng = random.Random(seed)  # noqa: S311 (arrival times, not secrets)
    arrivals, at = [], 0.0
    while True:
        at += rng.expovariate(rate)
        if at >= seconds:
            break
        arrivals.append(at)
    senders = _senders(url, max_in_flight, timeout_s, grpc)
    samples, stop, lock = Samples(), threading.Event(), threading.Lock()
    next_index = iter(range(len(arrivals)))
    origin = time.perf_counter()

    def work(index: int) -> None:
        send = senders[index][0]
        while True:
            with lock:
                n = next(next_index, None)
            if n is None:
                return
            scheduled = origin + arrivals[n]
            delay = scheduled - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            status = send(requests[n % len(requests)])
            samples.add(time.perf_counter() - scheduled, status)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(max_in_flight)]
    watcher = threading.Thread(target=_watch, args=(samples, stop, progress), daemon=True)
    watcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    samples.seconds = max(time.perf_counter() - origin, 1e-9)
    stop.set()
    for _, close in senders:
        close()
    return samples
