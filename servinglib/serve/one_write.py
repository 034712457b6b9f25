"""Each answer leaves in one write: the response head waits for its body.

uvicorn writes a response's status line and headers as soon as the application starts the
response, and the body when it arrives: two ``send`` calls, two TCP segments, and two
wake-ups of the client for every answer, although servinglib always has the whole body
ready when it starts a response. On loopback each ``send`` also runs the receiving side's
TCP work in the sender's thread: the two writes were the largest item of the event loop's
own time in a profile of the MiniLM benchmark. :class:`OneWriteTransport` stands between
one request's uvicorn cycle and the connection and sends the head together with the first
piece of body.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OneWriteTransport"]

_CONTINUE = b"HTTP/1.1 100 "


class OneWriteTransport:
    """The connection's transport for one request's cycle; holds the head until the body.

    The first write of a cycle that is not ``100 Continue`` is the response head (uvicorn
    writes nothing else first); it is held and sent with the next write. Closing sends a
    held head first, as uvicorn would have. Everything else is the transport's own.

    Example::

        cycle.transport = OneWriteTransport(protocol.transport)
    """

    __slots__ = ("_head", "_started", "_transport")

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._head: bytes | None = None
        self._started = False

    def write(self, data: bytes) -> None:
        """Hold the head; send it with the first body write; pass the rest through."""
        if self._head is not None:
            head, self._head = self._head, None
            self._transport.write(head + data)
        elif not self._started and not data.startswith(_CONTINUE):
            self._started = True
            self._head = bytes(data)
        else:
            self._transport.write(data)

    def close(self) -> None:
        """Send a held head, then close."""
        if self._head is not None:
            head, self._head = self._head, None
            self._transport.write(head)
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
