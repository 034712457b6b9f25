"""A bounded disk spool of prediction events, for a sink that is down or slow.

Each spilled batch is one JSON-lines segment file named ``<time_ns>-<pid>.jsonl``, written
to a temporary name and renamed, so a killed worker never leaves a partial segment. Names
sort in spill order; a worker replays its own segments oldest first, and adopts those of
workers that are gone (a rename: only one worker wins each), and at its start those that
carry its own pid (left by an earlier process that had the same pid, as in a container
restart). A segment is deleted only once replayed. ``max_bytes`` bounds what one worker
holds; a batch that does not fit is refused.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from servinglib.monitoring.prediction_events import encode

__all__ = ["Spool"]

log = logging.getLogger("servinglib.prediction_log")

_SUFFIX = ".jsonl"


def _lines(path: Path) -> int:
    """How many records a segment holds (0 if it is gone)."""
    try:
        with path.open("rb") as segment:
            return sum(1 for line in segment if line.strip())
    except FileNotFoundError:
        return 0


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
        self._sizes: dict[Path, tuple[int, int]] = {}  # bytes and records of each segment
        self.bytes = self.records = 0
        self.adopt(start=True)

    def adopt(self, start: bool = False) -> int:
        """Take over the segments of dead workers (at ``start``, also those that carry this
        pid); how many were adopted."""
        adopted = 0
        for path in sorted(self.directory.glob(f"*{_SUFFIX}")):
            stem, _, pid = path.stem.partition("-")
            if not pid.isdigit() or path in self._sizes:
                continue
            if int(pid) == self._pid:
                if not start:
                    continue
                mine = path
            elif _alive(int(pid)):
                continue
            else:
                mine = path.with_name(f"{stem}-{self._pid}{_SUFFIX}")
                try:
                    path.rename(mine)
                except FileNotFoundError:  # another worker adopted it first
                    continue
            try:
                size = mine.stat().st_size
            except FileNotFoundError:  # another worker adopted it meanwhile
                continue
            self._add(mine, size, _lines(mine))
            adopted += 1
        self._segments.sort()
        return adopted

    def _add(self, path: Path, size: int, records: int) -> None:
        self._segments.append(path)
        self._sizes[path] = (size, records)
        self.bytes += size
        self.records += records

    def _forget(self) -> Path:
        path = self._segments.pop(0)
        size, records = self._sizes.pop(path)
        self.bytes -= size
        self.records -= records
        return path

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
        self._add(path, len(data), len(events))
        return True

    def head(self) -> list[dict[str, Any]]:
        """The events of the oldest segment ([] when none is left).

        A segment another worker took meanwhile is forgotten; one that cannot be parsed is
        renamed ``*.bad`` (kept for inspection, never replayed) and logged.
        """
        while self._segments:
            path = self._segments[0]
            try:
                text = path.read_text()
                return [json.loads(line) for line in text.splitlines() if line]
            except FileNotFoundError:
                self._forget()
            except ValueError:
                self._forget()
                log.error("prediction spool: %s cannot be parsed; kept as %s.bad", path, path)
                path.rename(path.with_name(path.name + ".bad"))
        return []

    def pop(self) -> None:
        """Delete the oldest segment (replayed)."""
        self._forget().unlink(missing_ok=True)
