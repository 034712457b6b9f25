"""The rollout controller in the gunicorn master: its actions go through the admin API.

Routes added to the admin listener::

    GET  /admin/rollouts                          every rollout's status and gate evidence
    GET  /admin/rollouts/<model>/evidence         the whole persisted state (for the readout)
    POST /admin/rollouts/<model>/<command>        pause | resume | abort | promote | restart
"""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Any

from servinglib.config.spec import ServiceConfig
from servinglib.delivery.controller import CommandRefusedError, RolloutController
from servinglib.lifecycle.rollout import read_desired_state
from servinglib.lifecycle.rollout_state import load_state
from servinglib.monitoring.metrics import ServingMetrics
from servinglib.serve.admin import AdminServer

__all__ = ["AdminActions", "start_controller"]

_COMMAND = re.compile(r"^/admin/rollouts/([^/]+)/(pause|resume|abort|promote|restart)$")
_EVIDENCE = re.compile(r"^/admin/rollouts/([^/]+)/evidence$")


class AdminActions:
    """:class:`servinglib.delivery.controller.Actions` on top of one :class:`AdminServer`."""

    def __init__(self, admin: AdminServer, config: ServiceConfig) -> None:
        self._admin = admin
        self._state_dir = admin.state_dir
        self._defaults = {m.name: m.default_version for m in config.models}

    def default_version(self, model: str) -> str:
        """The plan's default, else the configured one."""
        plan = read_desired_state(self._state_dir).plan(model)
        return plan.default or self._defaults[model]

    def ensure_loaded(self, model: str, version: str) -> None:
        """Ask for a load once per desired state (a master restart starts a new one)."""
        plan = read_desired_state(self._state_dir).plan(model)
        if version not in plan.load and version != self.default_version(model):
            self._admin.change(model, version, "load")

    def ready_states(self, model: str, version: str) -> dict[str, str]:
        """Worker pid -> the version's state there."""
        return self._admin.ready_states(model, version)

    def set_traffic(self, model: str, weights: dict[str, float]) -> None:
        """The split every worker routes by (unchanged: nothing written)."""
        self._admin.set_traffic(model, weights)

    def promote(self, model: str, version: str) -> None:
        """Make ``version`` the default everywhere."""
        if self.default_version(model) != version:
            self._admin.move_default(model, "promote", version)


def start_controller(admin: AdminServer, config: ServiceConfig) -> RolloutController | None:
    """Start the controller when a model has a ``rollout:`` policy; wire its routes."""
    if not any(m.rollout is not None for m in config.models):
        return None
    controller = RolloutController(config, AdminActions(admin, config), ServingMetrics())

    def routes(method: str, path: str) -> tuple[int, Any] | None:
        if method == "GET" and path == "/admin/rollouts":
            return HTTPStatus.OK, controller.status()
        match = _EVIDENCE.match(path) if method == "GET" else _COMMAND.match(path)
        if match is None or method not in ("GET", "POST"):
            return None
        model = match.group(1)
        if model not in controller.policies:
            return HTTPStatus.NOT_FOUND, {"error": f"model {model!r} has no rollout policy"}
        if method == "GET":
            state = load_state(controller.policies[model].state_dir, model)
            return HTTPStatus.OK, None if state is None else state.to_json()
        try:
            return HTTPStatus.OK, controller.command(model, match.group(2))
        except CommandRefusedError as e:
            return HTTPStatus.CONFLICT, {"error": str(e)}

    admin.extra_routes = routes
    controller.start()
    return controller
