"""One version of one model in a worker: its lifecycle state, its record and who is told."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from servinglib.lifecycle.selftest import SelfTestReport
from servinglib.model import Model

__all__ = [
    "LifecycleListener",
    "ReadyVersion",
    "VersionRecord",
    "VersionState",
]


class VersionState(enum.Enum):
    """Where a model version is in its lifecycle."""

    DISCOVERED = "DISCOVERED"
    LOADING = "LOADING"
    SELF_TEST = "SELF_TEST"
    WARMING = "WARMING"
    READY = "READY"
    FAILED = "FAILED"


class LifecycleListener(Protocol):
    """Told about lifecycle events; the metrics layer implements it."""

    def version_state(self, model: str, version: str, state: VersionState) -> None:
        """A version entered ``state``."""

    def version_loaded(self, model: str, version: str, duration_s: float) -> None:
        """``load()`` returned after ``duration_s`` seconds."""

    def version_self_tested(
        self, model: str, version: str, duration_s: float, passed: bool
    ) -> None:
        """The self-tests of a version ran."""


@dataclass(frozen=True)
class ReadyVersion:
    """A READY version, as the request path sees it: its instance is always there.

    ``copies`` are the exclusive instances of ``instances: N`` (``copies[0]`` is
    ``instance``).
    """

    model: str
    version: str
    path: Path
    instance: Model
    copies: tuple[Model, ...]


@dataclass
class VersionRecord:
    """One version of one model in this worker (``ready`` is set while it is READY)."""

    model: str
    version: str
    path: Path
    state: VersionState = VersionState.DISCOVERED
    reason: str = ""
    instance: Model | None = None
    copies: list[Model] = field(default_factory=list)
    load_s: float = 0.0
    selftest_s: float = 0.0
    report: SelfTestReport = field(default_factory=SelfTestReport)
    ready: ReadyVersion | None = None
    example_output: Any = None  # the batch path's answer to the first self-test input
