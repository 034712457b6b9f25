"""Helpers of the progressive-delivery tests: a two-version service and a seeded load."""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Self

import requests
import yaml

from servinglib.serve.admin_client import AdminClient

FIXTURE = Path(__file__).parent.parent / "fixtures" / "delivery"
TOKEN = "s3cret-token-for-tests-only-0123456789"
ENV = {"SERVINGLIB_ADMIN_TOKEN": TOKEN}


def delivery_service(
    root: Path,
    admin_port: int,
    candidate: dict[str, Any],
    baseline: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    **policy: Any,
) -> Path:
    """servinglib.yaml of model ``m``: version 1 (baseline) and 2 (candidate) behaving as
    told (see fixtures/delivery/canary.py), with a rollout policy of small windows;
    ``model``: more keys of the model entry."""
    shutil.copy(FIXTURE / "canary.py", root / "canary.py")
    for version, behaviour in (("1", baseline or {}), ("2", candidate)):
        (root / "repo" / version).mkdir(parents=True, exist_ok=True)
        (root / "repo" / version / "behaviour.json").write_text(json.dumps(behaviour))
    rollout = {
        "candidate": "2",
        "steps": [{"weight": 25}, {"weight": 50}],
        "min_requests": 80,
        "min_seconds": 1,
        "interval_s": 0.2,
        **policy,
    }
    config = {
        "service": "delivery",
        "server": {"workers": 2, "threads": 4},
        "admin": {"enabled": True, "port": admin_port},
        "models": [
            {
                "name": "m",
                "class": "canary.py:CanaryModel",
                "repository": "repo",
                "default_version": "1",
                "require_self_tests": False,
                "input_schema": {"type": "object"},
                "rollout": rollout,
                **(model or {}),
            }
        ],
    }
    path = root / "servinglib.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class LoadThreads:
    """Client threads running ``_run`` from ``with`` until its end (``_stop`` set)."""

    def __init__(self, threads: int) -> None:
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def _run(self) -> None:
        raise NotImplementedError  # each load says what its threads send

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


class Load(LoadThreads):
    """Requests ``i = 0, 1, 2...`` (routing key ``i``) from 4 threads until stopped; counts
    answers per (status, version). The same ``i`` fail and route the same way every run."""

    def __init__(self, url: str, start: int = 0) -> None:
        self.url = url
        self.answers: Counter[tuple[int, str]] = Counter()
        self.errors: list[str] = []
        self._next = start
        self._lock = threading.Lock()
        super().__init__(4)

    def _take(self) -> int:
        with self._lock:
            self._next += 1
            return self._next

    def _run(self) -> None:
        with requests.Session() as session:
            while not self._stop.is_set():
                i = self._take()
                try:
                    response = session.post(
                        f"{self.url}/infer",
                        timeout=30,
                        headers={"x-routing-key": str(i)},
                        json={"model_id": "m", "features": {"i": i}},
                    )
                except requests.RequestException as e:
                    self.errors.append(repr(e))
                    continue
                version = response.json().get("version", "") if response.ok else ""
                self.answers[(response.status_code, version)] += 1

    def wait_answers(self, count: int, timeout_s: float = 60) -> None:
        """Wait until ``count`` more answers came back."""
        target = sum(self.answers.values()) + count
        deadline = time.monotonic() + timeout_s
        while sum(self.answers.values()) < target:
            assert time.monotonic() < deadline, f"load stalled: {self.answers} {self.errors[:3]}"
            self._stop.wait(0.02)

    def __enter__(self) -> Load:
        super().__enter__()
        return self


def wait_rollout(
    client: AdminClient, statuses: set[str], timeout_s: float = 90, step: int | None = None
) -> dict[str, Any]:
    """Poll ``GET /admin/rollouts`` until model m's rollout is in one of ``statuses``
    (and on ``step`` when given); returns its summary."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, body = client.call("GET", "/admin/rollouts")
        assert status == 200, body
        rollout: dict[str, Any] = body["m"]
        if rollout["status"] in statuses and (step is None or rollout["step"] == step):
            return rollout
        if time.monotonic() > deadline:
            raise AssertionError(f"rollout still {rollout['status']}: {json.dumps(rollout)}")
        time.sleep(0.1)


def version_outcomes(url: str, version: str) -> Counter[str]:
    """``servinglib_requests_total`` of model m's ``version`` by outcome, from /metrics."""
    return all_outcomes(url).get(("m", version), Counter())


def all_outcomes(url: str) -> dict[tuple[str, str], Counter[str]]:
    """``servinglib_requests_total`` by (model, version), then outcome: one read of /metrics."""
    outcomes: dict[tuple[str, str], Counter[str]] = {}
    for line in requests.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("servinglib_requests_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
            counts = outcomes.setdefault((labels["model"], labels["version"]), Counter())
            counts[labels["outcome"]] += int(float(line.rsplit(" ", 1)[1]))
    return outcomes


def chromium_driver(profile: Path) -> Any:
    """Headless Chromium through Debian's chromedriver, with an empty profile and no
    network of its own; skips the test when either is missing."""
    import pytest

    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.skip("needs Debian's chromium and chromium-driver (.ci/run installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(shutil.which("chromium"))
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(str(shutil.which("chromedriver"))))
