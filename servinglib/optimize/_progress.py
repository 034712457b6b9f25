"""A progress bar (tqdm, on stderr) with a total fixed up front that always reaches it."""

from __future__ import annotations

from typing import Any

from servinglib.optimize._deps import require

__all__ = ["Progress"]


class Progress:
    """Counts finished steps; ``enabled=False`` makes every call a no-op but the count.

    The total is planned once (work that may not be needed, such as retries, is planned
    too); :meth:`advance_to` skips the planned steps that turned out not to be needed, so
    the total never changes and a finished run shows 100 %.
    """

    def __init__(self, total: int, *, enabled: bool = True, description: str = "optimize") -> None:
        self._bar: Any = None
        self.total = total
        self.done = 0
        if enabled:
            tqdm = require("tqdm", "the progress bar (or pass --no-progress)")
            self._bar = tqdm.tqdm(total=total, desc=description, unit="step", leave=True)

    def step(self, label: str) -> None:
        """Count one step done and show its ``label``."""
        self.advance_to(min(self.done + 1, self.total), label)

    def advance_to(self, done: int, label: str) -> None:
        """Count steps up to ``done`` (never past the total) and show ``label``."""
        done = min(max(done, self.done), self.total)
        if self._bar is not None:
            self._bar.set_postfix_str(label, refresh=False)
            self._bar.update(done - self.done)
        self.done = done

    def close(self, *, finished: bool = True) -> None:
        """Finish the bar: at its total, or where it stopped when the run failed."""
        if finished:
            self.advance_to(self.total, "done")
        if self._bar is not None:
            self._bar.close()
