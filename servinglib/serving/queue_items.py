"""What waits in a :class:`~servinglib.serving.batching.DynamicBatcher` queue, and who is told."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Arrival", "BatchListener", "QueuedItem", "ReleaseOrder", "settle"]


class BatchListener(Protocol):
    """Told about queues and batches; the metrics layer implements it."""

    def batch_executed(self, model: str, version: str, size: int) -> None:
        """A batch of ``size`` requests was run."""

    def request_queued(self, model: str, version: str, seconds: float) -> None:
        """A request waited ``seconds`` in the queue before its batch ran."""

    def queue_depth(self, model: str, version: str, depth: int) -> None:
        """The queue now holds ``depth`` requests."""


@dataclass
class QueuedItem:
    """One queued request: its payload, its future and when it must be answered by."""

    payload: Any
    future: Future[Any]
    enqueued: float
    deadline: float | None
    sequence: int
    priority: int


@dataclass
class Arrival:
    """A request announced by :meth:`DynamicBatcher.incoming`; ``submit`` consumes it."""

    pending: bool = True


@dataclass
class ReleaseOrder:
    """Releases results in submission order (``preserve_ordering``)."""

    next_sequence: int = 0
    done: dict[int, tuple[QueuedItem, Any, BaseException | None]] = field(default_factory=dict)


def settle(item: QueuedItem, output: Any, error: BaseException | None) -> None:
    """Resolve ``item`` with ``output`` or ``error`` unless it already was."""
    if item.future.done():
        return
    if error is None:
        item.future.set_result(output)
    else:
        item.future.set_exception(error)
