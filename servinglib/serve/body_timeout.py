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

from dataclasses import dataclass

__all__ = ["BodyTimeout"]


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
