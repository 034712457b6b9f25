"""One job at a time per output directory: an exclusive ``flock`` on its ``_lock`` file.

The lock is held by the job's main process from before it looks at the directory until it
ends, so a second job, a ``--resume`` or an ``--overwrite`` started meanwhile is refused
before it reads, deletes or writes anything. The file names the holder (pid, host, start
time) for that refusal. The kernel releases a ``flock`` when its holder dies, however it
dies, so a lock left by a killed job is simply taken over by the next one.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType

from servinglib.batch._manifest import LOCK
from servinglib.errors import ConfigError

__all__ = ["OutputLock"]


class OutputLock:
    """The exclusive lock of one output directory.

    Example::

        with OutputLock(Path("scores")):
            ...  # no other batch job uses scores/ meanwhile
    """

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK
        self._fd: int | None = None
        self.previous: dict[str, object] | None = None  # what a stale lock file said

    def acquire(self) -> None:
        """Take the lock, or refuse naming the job that holds it.

        Raises:
            ConfigError: another job holds the lock.
        """
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(_read(fd))
            os.close(fd)
            raise ConfigError(
                f"{self.path.parent} is in use by another batch job ({holder}); wait for it "
                "to finish or stop it, then rerun (with --resume to finish its work)"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        self.previous = _read(fd) or None
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Let the next job in (the file stays: removing it would race with a new holder)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def _read(fd: int) -> dict[str, object]:
    try:
        raw = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _describe(holder: dict[str, object]) -> str:
    if not holder:
        return "its lock file names no holder yet"
    started = holder.get("started")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started))
        if isinstance(started, (int, float))
        else "an unknown time"
    )
    return f"pid {holder.get('pid')} on host {holder.get('host')}, started {when}"
