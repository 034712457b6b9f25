"""Traffic splitting: sticky, weighted assignment of requests to model versions."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping

__all__ = ["TrafficSplit"]


class TrafficSplit:
    """Weighted version choice; the same routing key always gets the same version.

    The key is hashed with the model name onto [0, 1) and compared with the cumulative
    weights, so a user keeps their version as long as the weights do not change::

        split = TrafficSplit("eta", {"2": 90, "3": 10})
        split.choose("user-42")     # "2" or "3", the same every time
    """

    def __init__(
        self, model: str, weights: Mapping[str, float], rng: Callable[[], float] = random.random
    ) -> None:
        total = float(sum(weights.values()))
        self.model = model
        self._rng = rng
        self._bounds: list[tuple[float, str]] = []
        running = 0.0
        for version, weight in weights.items():
            if weight <= 0:
                continue
            running += weight / total
            self._bounds.append((running, version))

    @property
    def versions(self) -> list[str]:
        """Versions that receive traffic."""
        return [version for _, version in self._bounds]

    def point(self, key: str | None) -> float:
        """Where ``key`` falls on [0, 1): a hash of model and key, or random without a key."""
        if key is None:
            return self._rng()
        digest = hashlib.sha256(f"{self.model}\0{key}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2.0**64

    def choose(self, key: str | None) -> str:
        """The version for a request with routing ``key`` (None: a random draw)."""
        point = self.point(key)
        for bound, version in self._bounds:
            if point < bound:
                return version
        return self._bounds[-1][1]
