"""servinglib.serve.admin: actions on one model are serialised and never unload the default.

In process: a real :class:`AdminServer` and a real registry of the fixture service following
the desired state through a real :class:`RolloutWatcher` (the worker-side loop).
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from servinglib.config.spec import load_config
from servinglib.lifecycle.registry import ModelRegistry
from servinglib.lifecycle.rollout import (
    RolloutWatcher,
    read_desired_state,
    read_worker_statuses,
    write_desired_state,
)
from servinglib.serve.admin import AdminServer

FIXTURE = Path(__file__).parents[1] / "fixtures" / "service"
TOKEN = "t" * 40


class Setup:
    """The admin server, the registry it steers, and the state directory between them."""

    def __init__(self, tmp_path: Path) -> None:
        shutil.copytree(FIXTURE / "models", tmp_path / "models")
        text = (FIXTURE / "servinglib.yaml").read_text()
        text = text.replace('default_version: "2"', 'default_version: "2"\n    versions: ["2"]', 1)
        (tmp_path / "servinglib.yaml").write_text(text)
        config = load_config(tmp_path / "servinglib.yaml", environ={})
        self.state_dir = tmp_path / "rollout"
        self.state_dir.mkdir()
        self.registry = ModelRegistry(config)
        self.registry.load_all()
        self.watcher = RolloutWatcher(self.registry, self.state_dir, interval_s=0.005)
        self.watcher.sync()
        self.watcher.start()
        self.admin = AdminServer(config, self.state_dir, TOKEN, 0, lambda: {os.getpid()})
        self.admin.start()

    def call(self, action: str, version: str | None = None) -> int:
        """The HTTP status the admin API answers ``action``."""
        try:
            if action in ("load", "unload"):
                assert version is not None
                self.admin.change("scorer", version, action)
                return 202
            self.admin.move_default("scorer", action, version)
        except Exception as e:  # the admin API's refusals carry their HTTP status
            return int(e.status)  # type: ignore[attr-defined]
        return 200

    def wait_ready(self, version: str) -> None:
        """Until this process's worker report says ``version`` is READY."""
        deadline = time.monotonic() + 30
        while True:
            reports = read_worker_statuses(self.state_dir, {os.getpid()})
            report = reports.get(os.getpid(), {})
            versions = report.get("models", {}).get("scorer", {}).get("versions", {})
            revision = read_desired_state(self.state_dir).revision
            if versions.get(version, {}).get("state") == "READY" and report["revision"] >= revision:
                return
            assert time.monotonic() < deadline, report
            time.sleep(0.01)

    def plan_default_and_unload(self) -> tuple[str, list[str]]:
        plan = read_desired_state(self.state_dir).plan("scorer")
        return plan.default or "2", list(plan.unload)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.watcher.stop()
    made.admin.stop()


def test_unload_of_the_default_or_of_a_promoted_version_is_refused(setup: Setup) -> None:
    assert setup.call("unload", "2") == 409
    assert setup.call("load", "1") == 202
    setup.wait_ready("1")
    assert setup.call("promote", "1") == 200
    assert setup.call("unload", "1") == 409  # just promoted: the default now
    assert setup.call("unload", "2") == 202  # the previous default may go
    assert setup.plan_default_and_unload() == ("1", ["2"])


def test_promote_or_rollback_to_a_version_with_an_unload_pending_is_refused(setup: Setup) -> None:
    assert setup.call("load", "1") == 202
    setup.wait_ready("1")
    assert setup.call("unload", "1") == 202
    # The worker may not have unloaded it yet (its report can still say READY): refused anyway.
    assert setup.call("promote", "1") == 409
    assert setup.plan_default_and_unload() == ("2", ["1"])
    assert setup.call("load", "1") == 202  # asked again: the unload is cancelled
    setup.wait_ready("1")
    assert setup.call("promote", "1") == 200
    assert setup.call("unload", "2") == 202
    assert setup.call("rollback") == 409  # back to 2, which is being unloaded
    assert setup.plan_default_and_unload() == ("1", ["2"])


def test_a_report_older_than_the_load_does_not_count_as_ready(setup: Setup) -> None:
    assert setup.call("load", "1") == 202
    setup.wait_ready("1")
    report = setup.state_dir / f"worker-{os.getpid()}.json"
    kept = report.read_bytes()
    setup.watcher.stop()  # the worker stops applying; its report stays at this revision
    report.write_bytes(kept)
    assert setup.call("unload", "1") == 202
    assert setup.call("load", "1") == 202
    assert setup.call("promote", "1") == 409  # READY in a report from before the unload


def test_random_concurrent_actions_never_unload_the_default(setup: Setup) -> None:
    """1,000 random actions from 8 threads; after each one the desired state keeps its
    default, and the registry always answers for the default."""
    rng = random.Random(25)
    actions = [
        (rng.choice(["load", "unload", "promote", "rollback"]), rng.choice(["1", "2", "4"]))
        for _ in range(1000)
    ]
    statuses: Counter[tuple[str, int]] = Counter()
    violations: list[str] = []
    stop = threading.Event()

    def act(share: list[tuple[str, str]]) -> None:
        for action, version in share:
            status = setup.call(action, None if action == "rollback" else version)
            statuses[(action, status)] += 1
            default, unload = setup.plan_default_and_unload()
            if default in unload:
                violations.append(f"after {action} {version}: default {default}, unload {unload}")

    def serve() -> None:  # the request path's view: an unversioned call always finds a READY one
        while not stop.is_set():
            try:
                setup.registry.get("scorer")
            except Exception as e:
                violations.append(f"request: {e}")

    reader = threading.Thread(target=serve)
    reader.start()
    threads = [threading.Thread(target=act, args=(actions[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    reader.join()
    assert violations == []
    assert {status for _, status in statuses} <= {200, 202, 409}, statuses
    assert sum(statuses.values()) == 1000
    assert statuses[("unload", 409)] > 0  # the default was asked to go, and was refused


def test_a_hand_written_plan_that_unloads_its_default_keeps_it(setup: Setup) -> None:
    state = read_desired_state(setup.state_dir)
    state.revision += 1
    plan = state.plan("scorer")
    plan.default, plan.unload = "2", ["2"]  # what the admin API never writes
    write_desired_state(setup.state_dir, state)
    setup.wait_ready("2")  # applied at that revision, and still READY
    assert setup.registry.default_version("scorer") == "2"
    assert setup.registry.get("scorer").version == "2"
