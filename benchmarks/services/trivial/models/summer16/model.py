"""The trivial benchmark model: the sum of 16 floats (measures serving overhead only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import servinglib


class Sum16(servinglib.Model):
    """``{"values": [16 floats]}`` -> ``{"sum": float}``."""

    def load(self, path: Path) -> None:
        self.width = 16

    def predict(self, features: Any) -> dict[str, float]:
        return {"sum": float(sum(features["values"]))}
