"""The ready line: one human line from the master once every worker has loaded its models.

It starts with ``NOT READY`` instead when a model's default version failed in a worker.

Each worker writes ``<pid>.json`` (its models' READY and FAILED versions) into a directory
the master created before forking; a master thread prints, once, when every live worker
has written its file::

    ready: 3 models, 6 versions on http://127.0.0.1:8080 (2 workers)
      breast-cancer  READY 1, 2 (default 2)
      scorer         READY 1, 2 (default 2); FAILED 3 (see the log above)
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from servinglib.serving.catalog import VersionCatalog

__all__ = ["NOTE_ENV", "READY_DIR_ENV", "format_ready", "report_worker_ready", "watch_workers"]

READY_DIR_ENV = "SERVINGLIB_READY_DIR"
NOTE_ENV = "SERVINGLIB_READY_NOTE"
POLL_S = 0.1


def report_worker_ready(catalog: VersionCatalog | None) -> None:
    """Worker side: write this worker's version states (``catalog``: its service's)."""
    directory = os.environ.get(READY_DIR_ENV)
    if not directory or catalog is None:
        return
    models = {}
    for name in catalog.model_names():
        views = catalog.views(name)
        models[name] = {
            "default": catalog.default_version(name),
            "ready": [v.version for v in views if v.state == "READY"],
            "failed": [v.version for v in views if v.state == "FAILED"],
        }
    path = Path(directory) / f"{os.getpid()}.json"
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(models))
    partial.replace(path)  # the master never reads half a file


def format_ready(url: str, workers: int, models: Mapping[str, Mapping[str, Any]]) -> str:
    """The ready line and one line per model (see the module docstring)."""
    versions = sum(len(states["ready"]) for states in models.values())
    summary = f"{len(models)} models, {versions} versions on {url} ({workers} workers)"
    not_ready = [
        name for name, states in models.items() if states["default"] not in states["ready"]
    ]
    if not_ready:  # the workers are up, but /readyz answers 503 until a good default is set
        lines = [f"NOT READY (default version FAILED: {', '.join(not_ready)}): {summary}"]
    else:
        lines = [f"ready: {summary}"]
    width = max((len(name) for name in models), default=0)
    for name, states in models.items():
        line = f"  {name:<{width}}  READY {', '.join(states['ready']) or '-'}"
        line += f" (default {states['default']})"
        if states["failed"]:
            line += f"; FAILED {', '.join(states['failed'])} (see the log above)"
        lines.append(line)
    return "\n".join(lines)


def _remove_if_owner(directory: Path, owner: int) -> None:
    if os.getpid() == owner:  # forked workers inherit atexit handlers; only the master cleans
        shutil.rmtree(directory, ignore_errors=True)


def watch_workers(
    url: str, expected: int, live_pids: Callable[[], set[int]], note: str = ""
) -> Path:
    """Master side: make the directory and print the ready line once all workers wrote.

    Call before workers fork (gunicorn's ``when_ready``); returns the directory.
    """
    directory = Path(tempfile.mkdtemp(prefix="servinglib-ready-"))
    os.environ[READY_DIR_ENV] = str(directory)
    atexit.register(_remove_if_owner, directory, os.getpid())

    def watch() -> None:
        stop = threading.Event()
        while not stop.wait(POLL_S):
            pids = live_pids()
            reports = [directory / f"{pid}.json" for pid in pids]
            if len(pids) < expected or not all(path.exists() for path in reports):
                continue
            first = json.loads(reports[0].read_text())
            text = format_ready(url, len(pids), first)
            if note:
                text += "\n" + note.replace("{url}", url).rstrip()
            print(text, file=sys.stderr, flush=True)
            return

    threading.Thread(target=watch, name="servinglib-ready-line", daemon=True).start()
    return directory
