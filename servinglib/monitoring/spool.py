"""A bounded disk spool of prediction events, for a sink that is down or slow.

Each spilled batch is one JSON-lines segment file named ``<time_ns>-<pid>.jsonl``, written
to a temporary name and renamed, so a killed worker never leaves a partial segment. Names
sort in spill order; a worker replays its own segments oldest first, and adopts those of
workers that are gone (a rename: only one worker wins each). ``max_bytes`` bounds what one
worker holds; a batch that does not fit is refused.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from servinglib.monitoring.prediction_events import encode

__all__ = ["Spool"]

_SUFFIX = ".jsonl"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


class Spool:
    """The segments of one sink in ``directory`` that this process owns."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._pid = os.getpid()
        directory.mkdir(parents=True, exist_ok=True)
        self._segments: list[Path] = []
        self.bytes = 0
        self.adopt()

    def adopt(self) -> int:
        """Take over the segments of dead workers; how many were adopted."""
        adopted = 0
        for path in sorted(self.directory.glob(f"*{_SUFFIX}")):
            stem, _, pid = path.stem.partition("-")
            if not pid.isdigit() or int(pid) == self._pid or _alive(int(pid)):
                continue
            mine = path.with_name(f"{stem}-{self._pid}{_SUFFIX}")
            try:
                path.rename(mine)
            except FileNotFoundError:  # another worker adopted it first
                continue
            self._segments.append(mine)
            self.bytes += mine.stat().st_size
            adopted += 1
        self._segments.sort()
        return adopted

    @property
    def pending(self) -> int:
        """Segments waiting for replay."""
        return len(self._segments)

    def oldest_age_s(self) -> float:
        """Seconds since the oldest waiting segment was spilled (0 when empty)."""
        if not self._segments:
            return 0.0
        spilled_ns = int(self._segments[0].stem.partition("-")[0])
        return max(0.0, time.time() - spilled_ns / 1e9)

    def append(self, events: list[dict[str, Any]]) -> bool:
        """Spill ``events`` as one segment; False when it would exceed ``max_bytes``."""
        data = b"".join(encode(event) + b"\n" for event in events)
        if self.bytes + len(data) > self.max_bytes:
            return False
        name = f"{time.time_ns():020d}-{self._pid}{_SUFFIX}"
        path = self.directory / name
        temporary = self.directory / f".{name}.tmp"
        temporary.write_bytes(data)
        temporary.rename(path)
        self._segments.append(path)
        self.bytes += len(data)
        return True

    def head(self) -> list[dict[str, Any]]:
        """The events of the oldest segment."""
        text = self._segments[0].read_text()
        return [json.loads(line) for line in text.splitlines() if line]

    def pop(self) -> None:
        """Delete the oldest segment (replayed)."""
        path = self._segments.pop(0)
        self.bytes -= path.stat().st_size
        path.unlink()
