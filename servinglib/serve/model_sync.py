"""The gunicorn master's store sync: URL repositories into the cache, new versions into
every worker.

Before gunicorn starts, :func:`initial_sync` copies every URL repository's versions into
the local cache, once per server (workers only read the cache). A store that does not
answer leaves the cache as it is: warm, the cached versions serve; cold, the model is not
ready and :class:`StoreSync` retries with exponential backoff.

With ``model_sync`` it keeps polling the store: a new version (whose file listing did not
change between two polls, so an upload in progress is not taken) is downloaded and added
to the rollout desired state, so every worker loads and self-tests it
(:mod:`servinglib.lifecycle.rollout`). It becomes the default by the admin API, or by
itself once READY in every worker with ``promote: when_ready``. A store outage never
unloads anything. Each poll's outcome is in ``store.json`` of the rollout directory,
which the workers show in ``/models`` and as ``servinglib_model_sync_*`` metrics.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from servinglib.config.spec import ModelConfig, ServiceConfig
from servinglib.lifecycle.rollout import (
    STATE_LOCK,
    SYNC_STATUS_FILE,
    read_desired_state,
    read_worker_statuses,
    write_desired_state,
)
from servinglib.lifecycle.store import (
    StoreError,
    cached_versions,
    list_store,
    sync_model,
    sync_service,
)

__all__ = ["StoreSync", "initial_sync", "start_store_sync"]

log = logging.getLogger("servinglib.model_sync")

MIN_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0


@dataclass
class ModelSyncState:
    """What the last polls of one model's store did (written to ``store.json``)."""

    url: str
    ok: bool = True
    error: str = ""
    failures: int = 0
    polls: int = 0
    downloads: int = 0
    last_success_unix: float = 0.0
    next_poll_unix: float = 0.0
    store_versions: list[str] = field(default_factory=list)
    pending_promotion: list[str] = field(default_factory=list)


_start_failures: dict[str, str] = {}  # of this master's initial_sync


def initial_sync(config: ServiceConfig) -> dict[str, str]:
    """Fill the cache before the workers start; returns each failing model's error."""
    _start_failures.clear()
    _start_failures.update(sync_service(config))
    return dict(_start_failures)


def start_store_sync(
    config: ServiceConfig, state_dir: Path, live_pids: Callable[[], set[int]]
) -> StoreSync:
    """Start the master's polling thread (retries of a failed start, ``model_sync``)."""
    sync = StoreSync(config, state_dir, live_pids, dict(_start_failures))
    sync.start()
    return sync


class StoreSync:
    """The master's thread polling the stores of URL repositories."""

    def __init__(
        self,
        config: ServiceConfig,
        state_dir: Path,
        live_pids: Callable[[], set[int]],
        failed: dict[str, str],
    ) -> None:
        self._state_dir = state_dir
        self._live_pids = live_pids
        self._models = [m for m in config.models if m.repository_url is not None]
        now = time.time()
        self._states = {}
        for m in self._models:
            assert m.repository_url is not None
            state = ModelSyncState(m.repository_url, next_poll_unix=now)
            if m.name in failed:
                state.ok, state.error, state.failures = False, failed[m.name], 1
                state.next_poll_unix = now + MIN_BACKOFF_S
            elif m.model_sync is not None:
                state.next_poll_unix = now + m.model_sync.interval_s
            else:
                state.next_poll_unix = float("inf")  # synced at start; nothing to follow
            self._states[m.name] = state
        self._seen: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="servinglib-sync", daemon=True)
        self._write_status()

    def start(self) -> None:
        """Start polling (when some model needs it)."""
        self._thread.start()

    def stop(self) -> None:
        """Stop polling."""
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            now = time.time()
            for model in self._models:
                state = self._states[model.name]
                if now >= state.next_poll_unix:
                    self.poll(model)
                if state.pending_promotion:
                    self._promote_ready(model)

    def poll(self, model: ModelConfig) -> None:
        """List the store, download new stable versions, ask the workers to load them."""
        state = self._states[model.name]
        state.polls += 1
        try:
            listing = list_store(model)
            cached = set(cached_versions(model))
            seen = self._seen.setdefault(model.name, {})
            if model.model_sync is None or not cached:
                ready = dict(listing.versions)  # a start that failed: take what is there
            else:  # a version whose listing is the same twice in a row is uploaded
                ready = {v: f for v, f in listing.versions.items() if seen.get(v) == f}
            self._seen[model.name] = dict(listing.versions)
            new = {v: f for v, f in ready.items() if v not in cached}
            downloaded = sync_model(model, type(listing)(new), evict=False)
        except StoreError as e:
            state.failures += 1
            delay = min(MAX_BACKOFF_S, MIN_BACKOFF_S * 2 ** (state.failures - 1))
            if model.model_sync is not None:  # never later than the next poll would be
                delay = min(delay, max(model.model_sync.interval_s, MIN_BACKOFF_S))
            state.ok, state.error = False, str(e)
            state.next_poll_unix = time.time() + delay
            log.error("model %r: store sync failed (retry in %.0fs): %s", model.name, delay, e)
            self._write_status()
            return
        state.ok, state.error, state.failures = True, "", 0
        state.last_success_unix = time.time()
        state.store_versions = sorted(listing.versions)
        state.downloads += len(downloaded)
        if model.model_sync is not None:
            state.next_poll_unix = time.time() + model.model_sync.interval_s
        elif set(listing.versions) <= set(cached_versions(model)):
            state.next_poll_unix = float("inf")  # caught up after a failed start
        else:
            state.next_poll_unix = time.time() + MIN_BACKOFF_S
        if downloaded:
            self._ask_workers_to_load(model, downloaded)
            if model.model_sync is not None and model.model_sync.promote == "when_ready":
                state.pending_promotion = sorted(set(state.pending_promotion) | set(downloaded))
        self._write_status()

    def _ask_workers_to_load(self, model: ModelConfig, versions: list[str]) -> None:
        with STATE_LOCK:
            desired = read_desired_state(self._state_dir)
            desired.revision += 1
            plan = desired.plan(model.name)
            for version in versions:
                if version in plan.unload:
                    plan.unload.remove(version)
                if version not in plan.load:
                    plan.load.append(version)
                plan.load_revisions[version] = desired.revision
            write_desired_state(self._state_dir, desired)
        log.info("model %r: asked every worker to load %s", model.name, versions)

    def _promote_ready(self, model: ModelConfig) -> None:
        """``promote: when_ready``: the newest pending version READY in every worker."""
        state = self._states[model.name]
        with STATE_LOCK:
            desired = read_desired_state(self._state_dir)
            plan = desired.plan(model.name)
            statuses = read_worker_statuses(self._state_dir, self._live_pids())
            for version in reversed(state.pending_promotion):
                since = plan.load_revisions.get(version, 0)
                states = [
                    s.get("models", {}).get(model.name, {}).get("versions", {}).get(version, {})
                    for s in statuses.values()
                    if s.get("revision", -1) >= since
                ]
                if not statuses or len(states) < len(statuses):
                    return  # a worker has not applied the load yet
                found = {s.get("state") for s in states}
                if found == {"READY"}:
                    current = plan.default or model.default_version
                    if version != current:
                        plan.previous_defaults.append(current)
                        plan.default = version
                        desired.revision += 1
                        write_desired_state(self._state_dir, desired)
                        log.info("model %r: version %r promoted (READY)", model.name, version)
                    state.pending_promotion = []
                    break
                if "FAILED" in found:
                    state.pending_promotion.remove(version)
        self._write_status()

    def _write_status(self) -> None:
        document = {name: asdict(state) for name, state in self._states.items()}
        for state in document.values():
            if state["next_poll_unix"] == float("inf"):
                state["next_poll_unix"] = None
        temporary = self._state_dir / f".{SYNC_STATUS_FILE}.{os.getpid()}.tmp"
        temporary.write_text(json.dumps(document), encoding="utf-8")
        os.replace(temporary, self._state_dir / SYNC_STATUS_FILE)
