"""A progress bar (tqdm, on stderr) that can be switched off and can grow as work is found."""

from __future__ import annotations

from typing import Any

from servinglib.optimize._deps import require

__all__ = ["Progress"]


class Progress:
    """Counts finished steps; ``enabled=False`` makes every call a no-op."""

    def __init__(self, total: int, *, enabled: bool = True, description: str = "optimize") -> None:
        self._bar: Any = None
        if enabled:
            tqdm = require("tqdm", "the progress bar (or pass --no-progress)")
            self._bar = tqdm.tqdm(total=total, desc=description, unit="step", leave=True)

    def step(self, label: str) -> None:
        """Count one step done and show its ``label``."""
        if self._bar is not None:
            self._bar.set_postfix_str(label, refresh=False)
            self._bar.update(1)

    def grow(self, steps: int) -> None:
        """More steps turned up (e.g. extra search candidates)."""
        if self._bar is not None:
            self._bar.total += steps
            self._bar.refresh()

    def close(self) -> None:
        """Finish the bar."""
        if self._bar is not None:
            self._bar.close()
