"""Logs: JSON lines for machines, or one readable line per record for people.

``server.log_format`` picks: ``json`` (one object per line, request logs carrying the
request id), ``text``, or ``auto`` (text when stderr is a terminal, else JSON).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import queue
import sys
import threading
import time
from typing import Any

from servinglib.lifecycle.tracebacks import format_exception

__all__ = ["JsonFormatter", "TextFormatter", "configure_logging", "flush_logs", "release_logging"]

_STANDARD_ATTRS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class _Formatter(logging.Formatter):
    """Tracebacks without the ``^^^^`` markers, safe to format on any thread."""

    def formatException(self, ei: Any) -> str:  # noqa: N802 (logging's name)
        """The traceback of ``ei`` (see ``servinglib.lifecycle.tracebacks``)."""
        error = ei[1]
        if error is None:
            return super().formatException(ei)
        return format_exception(error)


class JsonFormatter(_Formatter):
    """Format a record as one JSON line; ``extra={...}`` fields become top-level keys."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as JSON."""
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        extra = vars(record).keys() - _STANDARD_ATTRS
        for key in extra:
            if not key.startswith("_"):
                entry[key] = getattr(record, key)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(_Formatter):
    """``12:00:01 info  registry  model 'eta' version '1' READY  key=value ...``."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as one line (and the traceback, when there is one)."""
        clock = time.strftime("%H:%M:%S", time.localtime(record.created))
        # servinglib's own loggers by their last part (the JSON format keeps the whole name)
        logger = record.name
        if logger.startswith("servinglib."):
            logger = logger.rpartition(".")[2]
        line = f"{clock} {record.levelname.lower():<7} {logger:<10} {record.getMessage()}"
        extra = sorted(vars(record).keys() - _STANDARD_ATTRS)
        fields = [f"{key}={getattr(record, key)}" for key in extra if not key.startswith("_")]
        if fields:
            line += "  " + " ".join(fields)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


MAX_QUEUED_LINES = 100_000  # beyond this backlog, new lines are dropped and counted
GATHER_S = 0.005  # how long the writer lets lines gather before it writes them


class _LineWriter:
    """Formats and writes log records on a background thread, many lines per write.

    A request thread only queues its record (a few microseconds); formatting, the write
    system call and the flush happen on this thread, and records that arrive together are
    written together. One writer per process, restarted in a forked child (threads do not
    survive ``fork``); :func:`flush_logs` waits until everything queued is written (call it
    before exiting; it also runs at interpreter exit).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.dropped = 0  # lines refused while the backlog was full, not yet reported
        self._reset()

    def _reset(self) -> None:
        self._queue: queue.SimpleQueue[tuple[_QueueingHandler, logging.LogRecord] | threading.Event]
        self._queue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def put(self, handler: _QueueingHandler, record: logging.LogRecord) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="servinglib-log-writer", daemon=True
                    )
                    self._thread.start()
        if self._queue.qsize() >= MAX_QUEUED_LINES:  # the disk or pipe cannot keep up
            self.dropped += 1  # bounded memory; the count is reported in the next line
            return
        self._queue.put((handler, record))

    def flush(self, timeout_s: float = 5.0) -> None:
        if self._thread is None or not self._thread.is_alive():
            return
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout_s)

    def _run(self) -> None:
        while True:
            items = [self._queue.get()]
            if not isinstance(items[0], threading.Event):
                # Let the lines of the next few milliseconds gather: one wake-up and one
                # write per batch instead of per line, and while this thread sleeps a
                # request thread's put wakes nobody (about 30 us less per logged request).
                time.sleep(GATHER_S)
            while True:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            lines: dict[logging.StreamHandler[Any], list[str]] = {}
            if self.dropped:
                dropped, self.dropped = self.dropped, 0
                warning = json.dumps(
                    {
                        "level": "warning",
                        "logger": "servinglib.logs",
                        "message": f"{dropped} log lines dropped: stderr too slow",
                    }
                )
                for item in items:
                    if not isinstance(item, threading.Event):
                        lines.setdefault(item[0].target, []).append(warning)
                        break
            for item in items:
                if isinstance(item, threading.Event):
                    continue
                handler, record = item
                try:
                    lines.setdefault(handler.target, []).append(handler.format(record))
                except Exception:
                    handler.handleError(record)
            for target, text in lines.items():
                # A closed or broken stream must not kill the writer (nowhere left to log it).
                with contextlib.suppress(Exception):
                    target.stream.write("\n".join(text) + "\n")
                    target.flush()
            for item in items:
                if isinstance(item, threading.Event):
                    item.set()


_WRITER = _LineWriter()
os.register_at_fork(after_in_child=_WRITER._reset)
atexit.register(_WRITER.flush)


class _QueueingHandler(logging.Handler):
    """Hands records to the process's log writer thread instead of writing them here."""

    def __init__(self, target: logging.StreamHandler[Any]) -> None:
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        _WRITER.put(self, record)


def flush_logs(timeout_s: float = 5.0) -> None:
    """Wait until every queued log line is written (before a process exits)."""
    _WRITER.flush(timeout_s)


def configure_logging(level: str = "info", log_format: str = "json") -> None:
    """Send every servinglib log to stderr at ``level`` (other libraries' from warnings up),
    as JSON lines or readable text.

    ``log_format`` is ``json``, ``text`` or ``auto`` (text when stderr is a terminal).
    Lines are written by a background thread (see :class:`_LineWriter`), so a request never
    waits for its access-log line to reach the disk or the pipe.
    """
    if log_format == "auto":
        log_format = "text" if sys.stderr.isatty() else "json"
    stream = logging.StreamHandler(sys.stderr)
    handler = _QueueingHandler(stream)
    handler.setFormatter(TextFormatter() if log_format == "text" else JsonFormatter())
    root = logging.getLogger("servinglib")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    # Other libraries' warnings and errors (the OpenTelemetry SDK's unreachable collector,
    # urllib3, object-store clients) reach the root logger: they go out as the same lines,
    # not as Python's bare last-resort text.
    outside = _QueueingHandler(stream)
    outside.setFormatter(handler.formatter)
    outside.setLevel(logging.WARNING)
    _release_root().addHandler(outside)


def release_logging() -> None:
    """Undo :func:`configure_logging` after writing what is queued: servinglib's records
    propagate to the root logger again, which loses the handler it was given (so that a
    test runner's log capture keeps every record)."""
    flush_logs()
    logger = logging.getLogger("servinglib")
    logger.handlers.clear()
    logger.propagate = True
    _release_root()


def _release_root() -> logging.Logger:
    """The root logger, without the handler :func:`configure_logging` gave it."""
    top = logging.getLogger()
    top.handlers[:] = [h for h in top.handlers if not isinstance(h, _QueueingHandler)]
    return top
