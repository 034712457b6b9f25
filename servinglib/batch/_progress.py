"""The progress bar of a batch job: rows/s, error rows and ETA on stderr (tqdm when present)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Progress"]


class Progress:
    """Counts scored rows and errors; draws a bar when ``enabled`` and tqdm is installed."""

    def __init__(
        self,
        total: int | None,
        *,
        enabled: bool,
        initial: tuple[int, int] = (0, 0),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rows, self.errors = initial
        self.resumed_rows = initial[0]
        self._clock = clock
        self.started = clock()
        self._bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                print("(install tqdm for a progress bar)", file=sys.stderr)
            else:
                self._bar = tqdm(
                    total=total, initial=self.rows, unit=" rows", unit_scale=True, file=sys.stderr
                )
                self._bar.set_postfix(errors=self.errors, refresh=False)

    def update(self, rows: int, errors: int) -> None:
        """``rows`` more rows were scored, ``errors`` of them with an error."""
        self.rows += rows
        self.errors += errors
        if self._bar is not None:
            self._bar.update(rows)
            if errors:
                self._bar.set_postfix(errors=self.errors, refresh=False)

    @property
    def elapsed_s(self) -> float:
        """Seconds since the job started scoring."""
        return self._clock() - self.started

    def close(self) -> None:
        """Finish the bar."""
        if self._bar is not None:
            self._bar.close()
