"""Open-loop load for the overload benchmark and tests: requests at a fixed rate, whatever
the answers, over kept-alive connections or a new connection per request.

The kept-alive pool reuses the connection released last (LIFO), as Go's ``http.Transport``
(``hey``, most proxies' clients) and urllib3 (``requests``) do: under overload the
connection whose answer came back first (a refusal) gets the next request, which is how
one worker could end up with the traffic while another idled. A small HTTP/1.1 client on
asyncio streams keeps the client's own cost low (it shares the cores with the server).

Example::

    answers = open_loop(url, "/infer", body, rate=160, seconds=10, keepalive=True)
    Counter(a.status for a in answers)
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

__all__ = ["Answer", "closed_loop", "open_loop"]


@dataclass(frozen=True)
class Answer:
    """One request's outcome; status 0 is a client-side failure (timeout, reset, refused)."""

    status: int
    sent: float  # monotonic seconds
    done: float
    retry_after: str = ""
    error: str = ""

    @property
    def seconds(self) -> float:
        """The request's latency."""
        return self.done - self.sent


def open_loop(
    url: str,
    path: str,
    body: dict[str, Any],
    rate: float,
    seconds: float,
    *,
    keepalive: bool,
    connections: int = 128,
    timeout_s: float = 30.0,
) -> list[Answer]:
    """``rate`` requests/s to ``url`` + ``path`` for ``seconds``, evenly spaced.

    ``keepalive``: reuse up to ``connections`` connections, the last released first;
    otherwise a new connection per request (``Connection: close``). A request finding every
    connection busy waits for one (on the client), inside its ``timeout_s``.
    """
    split = urlsplit(url)
    host, port = split.hostname or "127.0.0.1", split.port or 80
    payload = orjson.dumps(body)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n"
        + ("" if keepalive else "Connection: close\r\n")
        + "\r\n"
    ).encode()
    pool = _Pool(host, port, connections, keepalive, head + payload)
    return asyncio.run(pool.run(rate, seconds, timeout_s))


def closed_loop(
    url: str, path: str, body: dict[str, Any], concurrency: int, seconds: float
) -> float:
    """Answers 200 per second with ``concurrency`` clients sending back to back, each
    request on a new connection (the kernel spreads them over the workers): capacity."""
    split = urlsplit(url)
    host, port = split.hostname or "127.0.0.1", split.port or 80
    payload = orjson.dumps(body)
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode() + payload

    async def client(until: float) -> int:
        pool, ok = _Pool(host, port, 1, False, request), 0
        while time.monotonic() < until:
            status, _ = await pool.exchange()
            ok += status == 200 and time.monotonic() <= until  # not what ends after the window
        return ok

    async def run() -> float:
        until = time.monotonic() + seconds
        counts = await asyncio.gather(*(client(until) for _ in range(concurrency)))
        return sum(counts) / seconds

    return asyncio.run(run())


class _Pool:
    def __init__(self, host: str, port: int, limit: int, keepalive: bool, request: bytes) -> None:
        self._host, self._port, self._keepalive, self._request = host, port, keepalive, request
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._limit = limit

    async def run(self, rate: float, seconds: float, timeout_s: float) -> list[Answer]:
        slots = asyncio.Semaphore(self._limit)
        tasks = []
        start = time.monotonic()
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(self._one(slots, timeout_s)))
        answers = list(await asyncio.gather(*tasks))
        for _, writer in self._idle:
            writer.close()
        return answers

    async def _one(self, slots: asyncio.Semaphore, timeout_s: float) -> Answer:
        sent = time.monotonic()
        try:
            async with asyncio.timeout(timeout_s), slots:
                status, retry_after = await self.exchange()
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as e:
            return Answer(0, sent, time.monotonic(), error=type(e).__name__)
        return Answer(status, sent, time.monotonic(), retry_after)

    async def exchange(self) -> tuple[int, str]:
        fresh = not self._idle
        reader, writer = (
            self._idle.pop()
            if self._idle
            else await asyncio.open_connection(self._host, self._port)
        )
        try:
            writer.write(self._request)
            head = await reader.readuntil(b"\r\n\r\n")
        except (OSError, asyncio.IncompleteReadError):
            writer.close()
            if fresh:
                raise
            return await self.exchange()  # a kept-alive connection the server had closed
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        await reader.readexactly(int(headers.get("content-length", "0")))
        if self._keepalive and headers.get("connection", "").lower() != "close":
            self._idle.append((reader, writer))
        else:
            writer.close()
        return status, headers.get("retry-after", "")
