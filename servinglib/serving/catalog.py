"""What the front ends may read about a worker's versions: a read-only view of the registry.

The HTTP routes, the gRPC front end and the readiness report list models and versions,
their states and (public) failure reasons, their declared signatures and READY
instances; none of them can load, unload or re-route a version. The registry itself stays
private to the service and the lifecycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servinglib.config.spec import ModelConfig, ServiceConfig
from servinglib.errors import public_reason
from servinglib.lifecycle.registry import ModelRegistry
from servinglib.lifecycle.versions import ReadyVersion, VersionRecord

__all__ = ["VersionCatalog", "VersionView"]


@dataclass(frozen=True, slots=True)
class VersionView:
    """One version as clients may see it (``reason`` without server paths)."""

    model: str
    version: str
    state: str
    reason: str
    ready: bool
    self_tests: tuple[int, int] = (0, 0)  # (passed, run) self-test cases

    def listing(self) -> dict[str, str]:
        """``{"version", "state"}`` plus ``"reason"`` when there is one."""
        entry = {"version": self.version, "state": self.state}
        if self.reason:
            entry["reason"] = self.reason
        return entry


class VersionCatalog:
    """Read-only questions about the versions of one worker."""

    __slots__ = ("_registry",)

    def __init__(self, registry: ModelRegistry) -> None:
        self._registry = registry

    @property
    def config(self) -> ServiceConfig:
        """The configuration the worker serves."""
        return self._registry.config

    def model_names(self) -> list[str]:
        """Every configured model, in the config's order."""
        return self._registry.model_names()

    def model_config(self, model: str) -> ModelConfig:
        """The (frozen) config entry of ``model``; raises ModelNotFoundError."""
        return self._registry.model_config(model)

    def default_version(self, model: str) -> str:
        """The version that answers when a request names none."""
        return self._registry.default_version(model)

    def ready(self, model: str, version: str | None = None) -> ReadyVersion:
        """The READY version (default when None); raises not-found or not-ready errors."""
        return self._registry.get(model, version)

    def view(self, model: str, version: str | None = None) -> VersionView:
        """One version (default when None), READY or not; raises not-found errors."""
        return _view(self._registry.record(model, version))

    def views(self, model: str) -> list[VersionView]:
        """Every version of ``model``, in version order."""
        return [_view(record) for record in self._registry.records(model)]

    def store_sync(self) -> Mapping[str, Any]:
        """URL repositories: the master's last store sync, per model (empty otherwise)."""
        status = self._registry.store_status
        return status() if status is not None else {}

    def is_ready(self) -> bool:
        """True when every model's default version is READY."""
        return self._registry.is_ready()


def _view(record: VersionRecord) -> VersionView:
    reason = public_reason(record.reason) if record.reason else ""
    cases = record.report.cases
    return VersionView(
        record.model,
        record.version,
        record.state.value,
        reason,
        record.ready is not None,
        (sum(1 for case in cases if case.passed), len(cases)),
    )
