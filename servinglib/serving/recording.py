"""The prediction log as the request path sees it: one port for primary and shadow answers."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["AnswerRecorder"]


class AnswerRecorder(Protocol):
    """Records answered requests for the prediction log (never blocks)."""

    def sampled(self) -> bool:
        """Whether this request is logged (its shadow copies follow the same draw)."""

    def record_answer(
        self,
        request_id: str,
        model: str,
        version: str,
        features: Any,
        output: Any,
        seconds: float,
        shadow_of: str | None = None,
    ) -> None:
        """Queue one answer of ``model`` ``version``; ``shadow_of`` names the primary version
        when it is a shadow copy's answer."""
