"""Safe rollout across gunicorn workers: a desired-state file every worker converges to.

The admin API (in the gunicorn master, see ``servinglib.serve.admin``) never touches a
model. It edits one JSON file; every worker watches it, loads or unloads versions and
moves its default pointer, and reports what it did in a status file of its own. A new
worker (after a crash) applies the same file before it accepts traffic, so all workers
converge. Promotion is a pointer swap inside each worker: requests in flight finish on the
version they started with and no request fails.

Desired state::

    {"revision": 3, "models": {"eta": {"load": ["3"], "unload": ["1"],
                                       "default": "3", "previous_defaults": ["2"],
                                       "traffic": {"2": 90, "3": 10}}}}
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servinglib.errors import ServinglibError
from servinglib.lifecycle.registry import ModelRegistry, VersionState
from servinglib.model import ModelCaller

__all__ = [
    "DESIRED_FILE",
    "STATE_LOCK",
    "SYNC_STATUS_FILE",
    "DesiredState",
    "ModelPlan",
    "RolloutWatcher",
    "apply_desired_state",
    "read_desired_state",
    "read_sync_status",
    "read_worker_statuses",
    "version_states",
    "write_atomically",
    "write_desired_state",
]

log = logging.getLogger("servinglib.lifecycle.rollout")

DESIRED_FILE = "desired.json"
# The master's store sync writes each URL repository's poll outcome here (per model).
SYNC_STATUS_FILE = "store.json"
# Held by every writer of the desired state in the master (the admin API, the store sync).
STATE_LOCK = threading.Lock()


@dataclass
class ModelPlan:
    """What the operator asked for one model."""

    load: list[str] = field(default_factory=list)
    load_revisions: dict[str, int] = field(default_factory=dict)
    unload: list[str] = field(default_factory=list)
    default: str | None = None
    previous_defaults: list[str] = field(default_factory=list)
    traffic: dict[str, float] | None = None  # a rollout step's split (None: the config's)

    def unloads_default(self, configured_default: str) -> bool:
        """Whether this plan would unload its own default (never written, never applied)."""
        return (self.default or configured_default) in self.unload


@dataclass
class DesiredState:
    """The whole desired state, with a revision that grows on every change."""

    revision: int = 0
    models: dict[str, ModelPlan] = field(default_factory=dict)

    def plan(self, model: str) -> ModelPlan:
        """The plan of ``model`` (created empty on first use)."""
        return self.models.setdefault(model, ModelPlan())

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"revision": self.revision, "models": {m: vars(p) for m, p in self.models.items()}}


def read_desired_state(directory: Path) -> DesiredState:
    """The desired state in ``directory`` (empty when there is none yet)."""
    path = directory / DESIRED_FILE
    if not path.is_file():
        return DesiredState()
    raw = json.loads(path.read_text(encoding="utf-8"))
    models = {name: ModelPlan(**plan) for name, plan in raw.get("models", {}).items()}
    return DesiredState(int(raw.get("revision", 0)), models)


def read_sync_status(directory: Path) -> dict[str, Any]:
    """The store sync's last status, per model (empty when there is none)."""
    try:
        status: dict[str, Any] = json.loads((directory / SYNC_STATUS_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return status


def write_atomically(path: Path, document: Any) -> None:
    """Replace ``path`` with ``document`` as JSON; readers never see half a file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    temporary.write_text(json.dumps(document, indent=1), encoding="utf-8")
    os.replace(temporary, path)  # readers see the old or the new file, never half of one


def write_desired_state(directory: Path, state: DesiredState) -> None:
    """Replace the desired state atomically."""
    write_atomically(directory / DESIRED_FILE, state.to_json())


def read_worker_statuses(
    directory: Path, pids: set[int] | None = None
) -> dict[int, dict[str, Any]]:
    """Status reports of the workers (only ``pids`` when given)."""
    statuses = {}
    for path in directory.glob("worker-*.json"):
        try:
            pid = int(path.stem.removeprefix("worker-"))
            if pids is None or pid in pids:
                statuses[pid] = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, json.JSONDecodeError):
            continue  # a report being replaced, or not ours
    return statuses


def version_states(directory: Path, pids: set[int], model: str, version: str) -> dict[str, str]:
    """Live worker pid -> state of ``version``, from reports of the revision that last asked
    to load it or later (an older report may predate an unload that the load undid)."""
    since = read_desired_state(directory).plan(model).load_revisions.get(version, 0)
    return {
        str(pid): s.get("models", {})
        .get(model, {})
        .get("versions", {})
        .get(version, {})
        .get("state", "ABSENT")
        if s.get("revision", -1) >= since
        else f"revision {since} not applied yet"
        for pid, s in read_worker_statuses(directory, pids).items()
    }


def apply_desired_state(
    registry: ModelRegistry,
    state: DesiredState,
    attempted: dict[tuple[str, str], int] | None = None,
    on_unload: Callable[[str, str], None] | None = None,
    caller: ModelCaller | None = None,
) -> list[str]:
    """Make ``registry`` match ``state``; returns what could not be done (yet).

    The default moves first, so a rollback never waits behind loads. A version is loaded
    once per load request: a FAILED one is retried only when it is asked for again.
    ``caller``: what the versions it loads call other models with.
    """
    attempted = {} if attempted is None else attempted
    notes: list[str] = []
    for model, plan in state.models.items():
        if model not in registry.model_names():
            notes.append(f"unknown model {model!r}")
            continue
        moved = _move_default(registry, model, plan, notes=None)
        registry.traffic_splits[model] = plan.traffic
        # The admin API never writes a plan that unloads its default; a hand-edited file
        # that does keeps it loaded.
        unload = [v for v in plan.unload if v != plan.default]
        # A fresh worker still points at its configured default: that one is unloaded once
        # the plan's default is loaded and in place, below.
        blocked = _unload(registry, model, unload, on_unload, notes=None)
        present = {r.version for r in registry.records(model)}
        for version in plan.load:
            requested = plan.load_revisions.get(version, 0)
            if version in unload or attempted.get((model, version), -1) >= requested:
                continue
            if (
                version in present
                and registry.record(model, version).state is not VersionState.FAILED
            ):
                attempted[(model, version)] = requested
                continue
            attempted[(model, version)] = requested
            try:
                registry.add_version(model, version, caller)
            except ServinglibError as e:
                notes.append(f"{model} {version}: {e}")
        if not moved:
            _move_default(registry, model, plan, notes)
        _unload(registry, model, blocked, on_unload, notes)
    return notes


def _unload(
    registry: ModelRegistry,
    model: str,
    versions: list[str],
    on_unload: Callable[[str, str], None] | None,
    notes: list[str] | None,
) -> list[str]:
    """Unload ``versions`` that are present; returns those that could not go (yet)."""
    blocked = []
    present = {r.version for r in registry.records(model)}
    for version in versions:
        if version not in present:
            continue
        try:
            registry.remove_version(model, version)
        except ServinglibError as e:
            blocked.append(version)
            if notes is not None:
                notes.append(f"{model} {version}: {e}")
            continue
        if on_unload is not None:
            on_unload(model, version)
    return blocked


def _move_default(
    registry: ModelRegistry, model: str, plan: ModelPlan, notes: list[str] | None
) -> bool:
    """Point the default at the plan's version when it is READY here; True when it is there."""
    if plan.default is None or plan.default == registry.default_version(model):
        return True
    try:
        registry.set_default(model, plan.default)
    except ServinglibError as e:
        if notes is not None:
            notes.append(f"{model}: default stays {registry.default_version(model)!r}: {e}")
        return False
    return True


def worker_status(registry: ModelRegistry, revision: int, notes: list[str]) -> dict[str, Any]:
    """This worker's report: applied revision, and each model's default and versions."""
    return {
        "pid": os.getpid(),
        "revision": revision,
        "notes": notes,
        "models": {
            name: {
                "default": registry.default_version(name),
                "versions": {
                    r.version: {"state": r.state.value, "reason": r.reason}
                    for r in registry.records(name)
                },
            }
            for name in registry.model_names()
        },
    }


class RolloutWatcher:
    """A worker's thread that follows the desired-state file and reports back."""

    def __init__(
        self,
        registry: ModelRegistry,
        directory: Path,
        interval_s: float = 0.2,
        on_unload: Callable[[str, str], None] | None = None,
        caller: ModelCaller | None = None,
    ) -> None:
        self._registry = registry
        self._on_unload = on_unload
        self._caller = caller
        self._attempted: dict[tuple[str, str], int] = {}
        self._directory = directory
        self._interval_s = interval_s
        self._applied = -1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="servinglib-rollout", daemon=True)

    def sync(self) -> None:
        """Apply the desired state now if it changed, and write this worker's status."""
        try:
            state = read_desired_state(self._directory)
        except (OSError, ValueError, TypeError) as e:
            log.error("cannot read the desired rollout state in %s: %s", self._directory, e)
            return
        if state.revision != self._applied:
            notes = apply_desired_state(
                self._registry, state, self._attempted, self._on_unload, self._caller
            )
            for note in notes:
                log.warning("rollout revision %d: %s", state.revision, note)
            self._applied = state.revision
            self._report(notes)

    def _report(self, notes: list[str]) -> None:
        status = worker_status(self._registry, self._applied, notes)
        write_atomically(self._directory / f"worker-{os.getpid()}.json", status)

    def start(self) -> None:
        """Start following the file (after the first :meth:`sync`)."""
        self._report([])
        self._thread.start()

    def _loop(self) -> None:
        last_report = time.monotonic()
        while not self._stop.wait(self._interval_s):
            before = self._applied
            self.sync()
            if self._applied != before:
                last_report = time.monotonic()
            elif time.monotonic() - last_report > 5:  # keep the report fresh (states change)
                self._report([])
                last_report = time.monotonic()

    def stop(self) -> None:
        """Stop following and remove this worker's status file."""
        self._stop.set()
        (self._directory / f"worker-{os.getpid()}.json").unlink(missing_ok=True)
