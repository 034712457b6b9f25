"""A gate's verdict with its evidence: what every gate returns and the readout replays."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["FAIL", "PASS", "UNKNOWN", "WAIT", "GateResult", "rate", "verdict"]

# fail: roll back; pass: this gate lets the step end; wait: not enough evidence yet;
# unknown: the evidence cannot be read (a query failed): the rollout pauses, never promotes.
FAIL, PASS, WAIT, UNKNOWN = "fail", "pass", "wait", "unknown"


@dataclass(frozen=True)
class GateResult:
    """One gate's verdict with the evidence behind it."""

    gate: str
    verdict: str
    baseline: float
    candidate: float
    threshold: float
    p_value: float
    samples: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (NaN as null)."""
        return {
            k: None if isinstance(v, float) and math.isnan(v) else v
            for k, v in asdict(self).items()
        }


def verdict(failed: bool, enough: bool) -> str:
    """fail, else pass with enough evidence, else wait."""
    return FAIL if failed else PASS if enough else WAIT


def rate(part: float, total: float) -> float:
    """``part / total``; NaN without a total."""
    return part / total if total else math.nan
