"""When a dynamic batch goes: Triton's rules, plus one that spares a lone client the delay.

A batch is dispatched when

* it is full (``max_batch_size``, or the largest ``preferred_batch_sizes`` available), or
* its oldest request has waited ``max_queue_delay_us``, or
* no other request is on its way (announced with ``DynamicBatcher.incoming()``) and it
  holds at least as many requests as the previous batch: waiting cannot be expected to grow
  it, so a lone client is never taxed with the queue delay (unlike a fixed window).

The second half of the last rule is for callers that cannot announce requests (an event
loop parses each request in one step): clients answered by the previous batch send their
next requests within a moment, and dispatching the first of them alone would split every
round into a batch of one and a batch of the rest. It forgets the previous batch after
ten queue delays without one, so a lone request after a quiet spell never waits.
"""

from __future__ import annotations

from servinglib.config.spec import BatchPolicy

__all__ = ["dispatch_size"]


def dispatch_size(
    policy: BatchPolicy,
    *,
    queued: int,
    closed: bool,
    announced: int,
    last_size: int,
    since_last_dispatch_s: float,
    oldest_wait_s: float,
) -> int | None:
    """How many of ``queued`` requests to dispatch now, or None to keep waiting.

    Args:
        policy: the version's batching policy.
        queued: requests in the queue (at least one).
        closed: the batcher is closing: whatever is queued goes.
        announced: requests announced as on their way (``incoming()``).
        last_size: the size of the previous batch.
        since_last_dispatch_s: seconds since the previous batch went.
        oldest_wait_s: seconds the oldest queued request has waited.
    """
    if queued >= policy.max_batch_size:
        return policy.max_batch_size
    fitting = [p for p in policy.preferred_batch_sizes if p <= queued]
    if fitting and queued >= max(policy.preferred_batch_sizes):
        return max(fitting)
    if closed:
        return queued
    delay = policy.max_queue_delay_us / 1e6
    if announced == 0 and (queued >= last_size or since_last_dispatch_s > 10 * delay):
        return queued  # nobody else is coming: waiting cannot grow the batch
    if oldest_wait_s >= delay:
        return queued
    return None
