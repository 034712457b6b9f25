"""How long a request body may take to arrive: ``server.body_timeout_s`` and a minimum rate.

A client that sends its head and then its body a byte at a time holds whatever waits for
that body: a gthread thread, or a connection slot and a buffer of the event loop. Both
worker classes give a body ``timeout_s`` after its head, plus one second for every
``min_bytes_per_s`` bytes received (Apache's ``mod_reqtimeout`` rule): a large body sent
at a reasonable pace always fits, a body that stalls or trickles slower than the rate is
answered 408 and its connection closed.

Example::

    limit = BodyTimeout(timeout_s=10.0, min_bytes_per_s=1024)
    if now >= limit.deadline(head_done_at, received):
        answer_408(limit.message(received))
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

__all__ = ["BodyTimeout", "TimedBody"]


@dataclass(frozen=True)
class BodyTimeout:
    """``server.body_timeout_s`` and ``server.body_min_bytes_per_s``."""

    timeout_s: float = 10.0
    min_bytes_per_s: int = 1024

    def deadline(self, started: float, received: int) -> float:
        """When a body begun at ``started`` with ``received`` bytes so far times out."""
        allowance = received / self.min_bytes_per_s if self.min_bytes_per_s else 0.0
        return started + self.timeout_s + allowance

    def message(self, received: int) -> str:
        """The 408's error message."""
        rate = (
            f" plus 1 s per {self.min_bytes_per_s} bytes received" if self.min_bytes_per_s else ""
        )
        return (
            f"the request body did not arrive in time ({received} bytes received; the limit "
            f"is {self.timeout_s:g} s after the head{rate}, server.body_timeout_s and "
            "server.body_min_bytes_per_s); send the body without pausing"
        )


class TimedBody:
    """The asyncio worker's side: an httptools protocol mixin that answers a late body 408.

    The protocol calls :meth:`body_began` when a head is complete and :meth:`time_body`
    after each read; a body still arriving after that read gets a timer, checked against
    :meth:`BodyTimeout.deadline` when it fires (and moved on while the body keeps pace).
    """

    body_limit = BodyTimeout()
    loop: Any
    transport: Any
    cycle: Any
    _receiving_body = False  # the head is complete, the body is not
    _body_started = 0.0
    _body_bytes = 0
    _body_timer: asyncio.TimerHandle | None = None

    if TYPE_CHECKING:  # the protocol class this is mixed into answers and closes

        def _answer_and_close(self, status: bytes, message: str) -> None: ...

    def body_began(self) -> None:
        """A request head is complete: its body, if any, starts now."""
        self._receiving_body = True  # until on_message_complete, often in the same read
        self._body_started = self.loop.time()
        self._body_bytes = 0

    def time_body(self) -> None:
        """After a read: a body still incomplete gets its timer."""
        if self._receiving_body and self._body_timer is None:
            self._body_timer = self.loop.call_later(self.body_limit.timeout_s, self._body_late)

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)  # type: ignore[misc]

    def on_message_complete(self) -> None:
        self._receiving_body = False
        self.stop_body_timer()
        super().on_message_complete()  # type: ignore[misc]

    def stop_body_timer(self) -> None:
        """Cancel the timer (the body is complete, or the connection gone)."""
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_late(self) -> None:
        """The body's time is up, unless it arrived fast enough to earn more."""
        self._body_timer = None
        if not self._receiving_body or self.transport.is_closing():
            return
        deadline = self.body_limit.deadline(self._body_started, self._body_bytes)
        now = self.loop.time()
        if now < deadline:
            self._body_timer = self.loop.call_later(deadline - now, self._body_late)
            return
        self.refuse_body()

    def refuse_body(self) -> None:
        """408 and close: the body did not arrive in time (or its slot is needed)."""
        self._receiving_body = False
        self.stop_body_timer()
        if self.cycle is not None and self.cycle.response_started:
            self.transport.close()
            return
        self._answer_and_close(b"408 Request Timeout", self.body_limit.message(self._body_bytes))
