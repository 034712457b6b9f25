"""What the service takes and gives: the decoded request, the answer, and its observers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from servinglib.serving.lanes import Lane, RejectionListener
from servinglib.shadow.copies import ShadowCopy

__all__ = [
    "DriftObserver",
    "InferenceRequest",
    "Prediction",
    "ServiceListener",
    "ShadowSubmitter",
]


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    """One decoded request, whatever protocol carried it.

    Attributes:
        model: the model name.
        inputs: LyftLearn-style features (checked against ``input_schema``), or, with
            ``tensors``, Open Inference tensors by input name (checked against the inputs
            the version declares).
        version: an explicit version; None lets the traffic split or the default decide.
        tensors: whether ``inputs`` are decoded tensors.
        request_id: echoed in logs, the prediction log and shadow comparisons.
        routing_key: the routing header's value (a configured routing feature wins).
        timeout_ms: the caller's time budget (Envoy's expected timeout), if any.
        priority: 0 is served first; None for the model's default.
        inline: the caller is a thread that would only wait for the answer (a composed
            model's step): a shared unbatched model runs on it instead of on the model's
            own executor, saving two thread hand-offs.
        observed: False for the calls a version makes while it loads (a composed model's
            self-tests and warm-up): answered as usual, but neither monitored for drift,
            written to the prediction log nor copied to shadows.
        waited_s: how long the request already waited for a server thread; it counts
            against the deadline.
        trace: the OpenTelemetry context of the request's span (None when tracing is off
            or the request is not sampled): see :mod:`servinglib.serving.tracing`.
        lane: the model's lane, when the front end looked it up already (its routing
            header, a version in the path): the service looks it up only when None.
    """

    model: str
    inputs: Any
    version: str | None = None
    tensors: bool = False
    request_id: str = ""
    routing_key: str | None = None
    timeout_ms: float | None = None
    priority: int | None = None
    inline: bool = False
    observed: bool = True
    waited_s: float = 0.0
    trace: Any = None
    lane: Lane | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Prediction:
    """What a model answered, which version answered it, and how long it took."""

    model: str
    version: str
    output: Any
    latency_s: float = 0.0


class ServiceListener(RejectionListener, Protocol):
    """Told about rejected inputs; the metrics layer implements it."""


class DriftObserver(Protocol):
    """Drift monitoring, as the service sees it."""

    def observe(
        self, model: str, version: str, features: Any, output: Any, tensors: bool = False
    ) -> None:
        """Count one answered request's features and outputs (never raises).

        ``tensors``: ``features`` are Open Inference tensors by name.
        """

    def report(self, model: str, version: str) -> dict[str, Any] | None:
        """Drift scores of the version across workers (None: it has no profile)."""


class ShadowSubmitter(Protocol):
    """The shadow router, as the service sees it."""

    enabled: bool

    def submit(self, copy: ShadowCopy) -> None:
        """Copy an answered request to the model's shadows (never blocks)."""
