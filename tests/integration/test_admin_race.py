"""Concurrent admin actions against a real server: the default is never unloaded, and every
unversioned request sent meanwhile is answered 200."""

from __future__ import annotations

import random
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from servinglib.serve.admin_client import AdminClient
from tests.conftest import LiveServer, free_port
from tests.integration.test_admin_rollout import TOKEN, Load, admin_service

pytestmark = pytest.mark.integration


class Watch:
    """Reads the desired state in a loop; remembers every state that unloads its default."""

    def __init__(self, client: AdminClient) -> None:
        self.client = client
        self.violations: list[Any] = []
        self.reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def check(self) -> None:
        plan = self.client.status()["desired"]["models"].get("scorer", {})
        self.reads += 1
        if (plan.get("default") or "2") in plan.get("unload", []):
            self.violations.append(plan)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.check()

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.check()


def _together(client: AdminClient, **calls: tuple[str, Any]) -> dict[str, int]:
    """POST every call at the same moment (one thread each); returns name -> status."""
    barrier = threading.Barrier(len(calls))
    answers: dict[str, int] = {}

    def send(name: str, path: str, body: Any) -> None:
        barrier.wait()
        answers[name] = client.call("POST", path, body)[0]

    threads = [threading.Thread(target=send, args=(n, *c)) for n, c in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def _converged_on_the_desired_default(client: AdminClient) -> None:
    client.wait_converged(client.status()["desired"]["revision"])
    status = client.status()
    desired = status["desired"]["models"].get("scorer", {})
    default = desired.get("default") or "2"
    for report in status["workers"].values():
        scorer = report["models"]["scorer"]
        assert scorer["default"] == default, status
        assert scorer["versions"][default]["state"] == "READY", status
        assert not set(desired.get("unload", [])) & set(scorer["versions"]), status


def test_unload_and_promote_sent_together_never_unload_the_default(
    tmp_path: Path, start_server: Any
) -> None:
    port = free_port()
    server: LiveServer = start_server(
        admin_service(tmp_path, port), "--workers", "2", env={"SERVINGLIB_ADMIN_TOKEN": TOKEN}
    )
    client = AdminClient(port, TOKEN)
    outcomes: Counter[tuple[int, int]] = Counter()
    with Load(server.url) as load, Watch(client) as watch:
        for _ in range(25):
            target = (
                "1"
                if (client.status()["desired"]["models"].get("scorer", {}).get("default") or "2")
                == "2"
                else "2"
            )
            client.load("scorer", target)
            assert set(client.wait_for("scorer", target).values()) == {"READY"}
            client.wait_converged(client.status()["desired"]["revision"])
            answers = _together(
                client,
                unload=(f"/admin/models/scorer/versions/{target}/unload", None),
                promote=("/admin/models/scorer/promote", {"version": target}),
            )
            outcomes[(answers["unload"], answers["promote"])] += 1
            assert (answers["unload"], answers["promote"]) != (202, 200), answers
    print(f"figures: unload+promote pairs {dict(outcomes)}, requests {dict(load.statuses)}")
    assert watch.violations == []
    assert set(outcomes) <= {(202, 409), (409, 200)}, outcomes
    _converged_on_the_desired_default(client)
    assert load.errors == []
    assert set(load.statuses) == {200}, load.statuses


def test_a_thousand_random_concurrent_admin_actions(tmp_path: Path, start_server: Any) -> None:
    port = free_port()
    server: LiveServer = start_server(
        admin_service(tmp_path, port), "--workers", "2", env={"SERVINGLIB_ADMIN_TOKEN": TOKEN}
    )
    client = AdminClient(port, TOKEN)
    rng = random.Random(1000)
    actions = [
        (
            rng.choice(["load", "load", "unload", "promote", "promote", "rollback"]),
            rng.choice(["1", "2", "4"]),
        )
        for _ in range(1000)
    ]
    statuses: Counter[tuple[str, int]] = Counter()

    def act(share: list[tuple[str, str]]) -> None:
        for action, version in share:
            if action in ("load", "unload"):
                path, body = f"/admin/models/scorer/versions/{version}/{action}", None
            else:
                path = f"/admin/models/scorer/{action}"
                body = {"version": version} if action == "promote" else None
            statuses[(action, client.call("POST", path, body)[0])] += 1

    with Load(server.url) as load, Watch(client) as watch:
        threads = [threading.Thread(target=act, args=(actions[i::8],)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    print(
        f"figures: actions {dict(statuses)}, state reads {watch.reads}, requests {dict(load.statuses)}"
    )
    assert sum(statuses.values()) == 1000
    assert {status for _, status in statuses} <= {200, 202, 409}, statuses
    assert watch.violations == [], watch.violations[:3]
    assert watch.reads > 10
    _converged_on_the_desired_default(client)
    assert load.errors == []
    assert set(load.statuses) == {200}, load.statuses
    assert sum(load.statuses.values()) > 100
