"""``servinglib admin``: call the loopback admin API of a running server."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from typing import Any

from servinglib.errors import ServinglibError

__all__ = ["AdminClient"]


class AdminClient:
    """A tiny client of the admin API on 127.0.0.1.

    Example::

        AdminClient(9901, os.environ["SERVINGLIB_ADMIN_TOKEN"]).promote("eta", "3")
    """

    def __init__(self, port: int, token: str, timeout_s: float = 30.0) -> None:
        self._base = f"http://127.0.0.1:{port}"
        self._token = token
        self._timeout_s = timeout_s

    @classmethod
    def from_env(cls, port: int, token_env: str) -> AdminClient:
        """A client whose token comes from the environment variable ``token_env``."""
        token = os.environ.get(token_env, "")
        if not token:
            raise ServinglibError(f"${token_env} is empty; export the admin token first")
        return cls(port, token)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One request; returns the status and the decoded JSON body."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 (always http://127.0.0.1)
            self._base + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:  # noqa: S310
                return response.status, self._decoded(response.read())
        except urllib.error.HTTPError as e:
            return e.code, self._decoded(e.read())
        except urllib.error.URLError as e:
            raise ServinglibError(f"cannot reach the admin API at {self._base}: {e.reason}") from e

    def _decoded(self, body: bytes) -> Any:
        """The JSON body; anything else means another server holds the port."""
        try:
            return json.loads(body or b"null")
        except ValueError:
            raise ServinglibError(
                f"{self._base} answered with something other than servinglib's admin API "
                f"({body[:60]!r}); another process (such as Envoy's admin listener) holds that "
                "port: check admin.port in servinglib.yaml"
            ) from None

    def status(self) -> Any:
        """Desired state and worker reports."""
        return self._checked(*self.call("GET", "/admin/status"))

    def load(self, model: str, version: str) -> Any:
        """Ask every worker to load ``version``."""
        return self._checked(*self.call("POST", f"/admin/models/{model}/versions/{version}/load"))

    def unload(self, model: str, version: str) -> Any:
        """Ask every worker to unload ``version``."""
        return self._checked(*self.call("POST", f"/admin/models/{model}/versions/{version}/unload"))

    def promote(self, model: str, version: str) -> Any:
        """Make ``version`` the default (it must be READY in every worker)."""
        return self._checked(
            *self.call("POST", f"/admin/models/{model}/promote", {"version": version})
        )

    def rollback(self, model: str) -> Any:
        """Return to the previous default."""
        return self._checked(*self.call("POST", f"/admin/models/{model}/rollback"))

    def wait_for(self, model: str, version: str, timeout_s: float = 300.0) -> dict[str, str]:
        """Wait until every worker reports ``version`` READY or FAILED; returns pid -> state."""
        deadline = time.monotonic() + timeout_s
        while True:
            workers = self.status()["workers"]
            states = {
                pid: report["models"]
                .get(model, {})
                .get("versions", {})
                .get(version, {})
                .get("state", "ABSENT")
                for pid, report in workers.items()
            }
            if states and all(state in ("READY", "FAILED") for state in states.values()):
                return states
            if time.monotonic() > deadline:
                raise ServinglibError(
                    f"{model} {version} still loading after {timeout_s:.0f}s: {states}"
                )
            time.sleep(0.2)

    def wait_converged(self, revision: int, timeout_s: float = 60.0) -> None:
        """Wait until every live worker has applied ``revision`` of the desired state."""
        deadline = time.monotonic() + timeout_s
        while True:
            workers = self.status()["workers"]
            if workers and all(
                report.get("revision", -1) >= revision for report in workers.values()
            ):
                return
            if time.monotonic() > deadline:
                raise ServinglibError(
                    f"workers did not apply revision {revision} in {timeout_s:.0f}s"
                )
            time.sleep(0.1)

    def rollouts(self) -> Any:
        """Every rollout's status and latest gate evidence."""
        return self._checked(*self.call("GET", "/admin/rollouts"))

    def rollout_command(self, model: str, command: str) -> Any:
        """``pause``, ``resume``, ``abort``, ``promote`` or ``restart`` the rollout of ``model``."""
        return self._checked(*self.call("POST", f"/admin/rollouts/{model}/{command}"))

    @staticmethod
    def _checked(status: int, body: Any) -> Any:
        if status >= 400:
            detail = (
                f" {body.get('detail')}" if isinstance(body, dict) and body.get("detail") else ""
            )
            message = body.get("error") if isinstance(body, dict) else body
            raise ServinglibError(f"admin API answered {status}: {message}{detail}")
        return body
