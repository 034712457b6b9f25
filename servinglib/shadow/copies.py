"""What the service hands the shadow router: one answered request to copy to its shadows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ShadowCopy"]


@dataclass(frozen=True, slots=True)
class ShadowCopy:
    """An answered request, as its shadows are given it.

    Attributes:
        model: the model that answered.
        primary: the version that answered (never copied to itself).
        features: the request's inputs, as the primary was given them.
        output: the primary's answer, which each shadow's answer is compared with.
        request_id: the request's id (the shadows' prediction-log rows carry it).
        log_answer: whether the primary's answer was logged: a shadow's answer is logged
            with it, under the same sampling.
        trace: the request's trace context; each copy's span is linked to it.
    """

    model: str
    primary: str
    features: Any
    output: Any
    request_id: str = ""
    log_answer: bool = True
    trace: Any = None
