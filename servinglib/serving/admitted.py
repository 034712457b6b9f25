"""One admitted request on its way through a model version: its deadline and its errors."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from servinglib.errors import (
    DeadlineExceededError,
    InvalidInputError,
    ModelNotReadyError,
    OverloadedError,
    PredictionError,
)
from servinglib.lifecycle.versions import ReadyVersion
from servinglib.model import CallScope
from servinglib.serving.lanes import Lane
from servinglib.serving.requests import InferenceRequest

__all__ = ["AdmittedCall"]


class AdmittedCall:
    """One admitted request on its way through the model: where, until when, since when."""

    __slots__ = ("_clock", "deadline", "lane", "ready", "started")

    def __init__(
        self, lane: Lane, ready: ReadyVersion, deadline: float, clock: Callable[[], float]
    ) -> None:
        self.lane = lane
        self.ready = ready
        self.deadline = deadline
        self.started = time.perf_counter()
        self._clock = clock

    def scope(
        self, request: InferenceRequest, followups: list[Callable[[], None]] | None
    ) -> CallScope:
        """What the calls a composed model makes for ``request`` inherit from it."""
        return CallScope(
            self.deadline, request.request_id, request.priority, request.routing_key, followups
        )

    def remaining(self) -> float:
        """Seconds left until the deadline."""
        return max(0.0, self.deadline - self._clock())

    def check_deadline(self) -> None:
        """Refuse to start a model call once the deadline has passed."""
        if self._clock() >= self.deadline:
            raise DeadlineExceededError("the request deadline passed before the model ran")

    def late(self) -> DeadlineExceededError:
        """The error of an answer that came (or would come) after the deadline."""
        return DeadlineExceededError(
            f"model {self.ready.model!r} did not answer within the request deadline"
        )

    @contextmanager
    def model_errors(self) -> Iterator[None]:
        """Map what the model raised: a 400 for rejected input, a logged 500 for the rest."""
        try:
            yield
        except InvalidInputError as e:
            self.lane.rejected(e.field or "features", self.ready)
            raise  # the model rejected its input on purpose: a 400, not a model failure
        except (OverloadedError, DeadlineExceededError, ModelNotReadyError, PredictionError):
            raise  # the executor refused or gave up (503 / 504), or a member failed (logged)
        except Exception as e:
            raise PredictionError.logged(
                self.ready.model, self.ready.version, "raised while predicting", e
            ) from e
