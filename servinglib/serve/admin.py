"""The admin API: load, promote, roll back and unload model versions across all workers.

Off by default. When ``admin.enabled`` is true it runs inside the gunicorn master on a
separate listener bound to 127.0.0.1 only, and every call needs
``Authorization: Bearer <token>`` (compared in constant time); the token comes from the
environment variable named by ``admin.token_env`` and has at least
:data:`MIN_TOKEN_LENGTH` characters. The public port has no admin routes.

Every answer is JSON, including the listener's own refusals (a malformed request line, a
method it has no route for: 401 without the token, 405 with it). A connection that sends
nothing for :data:`IDLE_TIMEOUT_S` is closed, so idle clients hold no master thread.
Workers close their inherited copy of the listening socket right after the fork.

It changes nothing itself: it edits the desired-state file that every worker follows
(:mod:`servinglib.lifecycle.rollout`) and reads back the workers' reports.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from servinglib.config.spec import ServiceConfig
from servinglib.errors import InvalidInputError, ServinglibError
from servinglib.lifecycle.artifacts import NAME_PATTERN, version_directory
from servinglib.lifecycle.rollout import (
    STATE_LOCK,
    ModelPlan,
    read_desired_state,
    read_worker_statuses,
    write_desired_state,
)
from servinglib.lifecycle.store import StoreError, fetch_version, list_store
from servinglib.wire.strict_json import parse_json

__all__ = ["IDLE_TIMEOUT_S", "MIN_TOKEN_LENGTH", "AdminServer"]

log = logging.getLogger("servinglib.admin")

_VERSION_ROUTE = re.compile(r"^/admin/models/([^/]+)/versions/([^/]+)/(load|unload)$")
_MODEL_ROUTE = re.compile(r"^/admin/models/([^/]+)/(promote|rollback)$")
_MAX_BODY = 64 * 1024
_MAX_DEPTH = 8  # the admin bodies are flat objects
MIN_TOKEN_LENGTH = 32
IDLE_TIMEOUT_S = 10.0
_METHODS = ("GET", "POST")


class _RefusedError(Exception):
    def __init__(self, status: HTTPStatus, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class AdminServer:
    """Loopback-only, token-protected admin listener of one gunicorn master.

    Example::

        admin = AdminServer(config, state_dir, token, 9901, lambda: set(arbiter.WORKERS))
        admin.start()
    """

    def __init__(
        self,
        config: ServiceConfig,
        state_dir: Path,
        token: str,
        port: int,
        live_pids: Callable[[], set[int]],
    ) -> None:
        if len(token) < MIN_TOKEN_LENGTH:
            raise ServinglibError(
                f"the admin API needs a token of at least {MIN_TOKEN_LENGTH} characters; set "
                "the variable named by admin.token_env (e.g. python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))')"
            )
        self._config = config
        self._state_dir = state_dir
        self._token = token.encode()
        self._live_pids = live_pids
        # Actions on one model run one at a time (their state checks see every earlier
        # action); the file lock guards the one file every model's plan lives in.
        self._model_locks = {model.name: threading.Lock() for model in config.models}
        self._file_lock = STATE_LOCK  # shared with the store sync of the same master
        admin = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "servinglib-admin"
            timeout = IDLE_TIMEOUT_S  # per socket operation: an idle client is dropped

            def log_message(self, format: str, *args: Any) -> None:
                log.info("admin %s", format % args)

            def send_error(
                self, code: int, message: str | None = None, explain: str | None = None
            ) -> None:
                """The listener's own refusals (bad request line, header too long): JSON."""
                payload = json.dumps({"error": message or HTTPStatus(code).phrase}).encode()
                self.request_version = "HTTP/1.0"  # never an HTTP/0.9 answer without a head
                self.send_response(code, message)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("Connection", "close")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            def do_GET(self) -> None:
                admin._dispatch(self, "GET")

            def do_POST(self) -> None:
                admin._dispatch(self, "POST")

            def do_PUT(self) -> None:
                admin._dispatch(self, "PUT")

            def do_DELETE(self) -> None:
                admin._dispatch(self, "DELETE")

            def do_PATCH(self) -> None:
                admin._dispatch(self, "PATCH")

            def do_OPTIONS(self) -> None:
                admin._dispatch(self, "OPTIONS")

        try:
            self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        except OSError as e:
            raise ServinglibError(
                f"the admin API cannot listen on 127.0.0.1:{port} ({e.strerror}): another "
                "process holds that port (in a pod, Envoy's admin listener often does); set "
                "admin.port in servinglib.yaml to a free port"
            ) from e
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="servinglib-admin", daemon=True
        )

    def start(self) -> None:
        """Start listening on 127.0.0.1."""
        self._thread.start()
        log.info("admin API listening on 127.0.0.1:%d", self.port)

    def stop(self) -> None:
        """Stop listening."""
        self._server.shutdown()
        self._server.server_close()

    def close_inherited(self) -> None:
        """In a forked worker: close this process's copy of the listening socket (only the
        master serves the admin API; a worker holding it could accept its connections)."""
        self._server.socket.close()

    # --- request handling ----------------------------------------------------------------
    def _dispatch(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        try:
            self._authorize(handler)
            status, body = self._route(handler, method)
        except _RefusedError as e:
            status, body = e.status, {"error": str(e)} | ({"detail": e.detail} if e.detail else {})
        except Exception:
            log.exception("admin request failed")
            status, body = (
                HTTPStatus.INTERNAL_SERVER_ERROR,
                {"error": "internal error; see the log"},
            )
        payload = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        if status == HTTPStatus.UNAUTHORIZED:
            handler.send_header("WWW-Authenticate", 'Bearer realm="servinglib-admin"')
        if status == HTTPStatus.METHOD_NOT_ALLOWED:
            handler.send_header("Allow", ", ".join(_METHODS))
        handler.end_headers()
        handler.wfile.write(payload)

    def _authorize(self, handler: BaseHTTPRequestHandler) -> None:
        header = handler.headers.get("Authorization", "")
        offered = header.removeprefix("Bearer ").encode() if header.startswith("Bearer ") else b""
        if not hmac.compare_digest(offered, self._token):
            raise _RefusedError(HTTPStatus.UNAUTHORIZED, "missing or wrong admin token")

    def _route(self, handler: BaseHTTPRequestHandler, method: str) -> tuple[HTTPStatus, Any]:
        path = handler.path.split("?", 1)[0]
        if method == "GET" and path == "/admin/status":
            return HTTPStatus.OK, self.status()
        if method == "POST":
            body = self._body(handler)
            if match := _VERSION_ROUTE.match(path):
                model, version, action = match.groups()
                return HTTPStatus.ACCEPTED, self.change(model, version, action)
            if match := _MODEL_ROUTE.match(path):
                model, action = match.groups()
                version = body.get("version") if isinstance(body, dict) else None
                return HTTPStatus.OK, self.move_default(model, action, version)
        if method not in _METHODS:
            raise _RefusedError(
                HTTPStatus.METHOD_NOT_ALLOWED,
                f"the admin API takes {' and '.join(_METHODS)}, not {method}",
            )
        raise _RefusedError(HTTPStatus.NOT_FOUND, f"no admin route {method} {path}")

    @staticmethod
    def _body(handler: BaseHTTPRequestHandler) -> Any:
        try:
            length = int(handler.headers.get("Content-Length") or 0)
        except ValueError:
            raise _RefusedError(
                HTTPStatus.BAD_REQUEST, "Content-Length must be an integer"
            ) from None
        if length < 0:
            raise _RefusedError(HTTPStatus.BAD_REQUEST, "Content-Length must not be negative")
        if length > _MAX_BODY:
            raise _RefusedError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "admin request body too large")
        raw = handler.rfile.read(length) if length else b""
        try:
            return parse_json(raw, _MAX_DEPTH) if raw.strip() else {}
        except InvalidInputError as e:
            raise _RefusedError(HTTPStatus.BAD_REQUEST, str(e)) from e

    # --- operations ----------------------------------------------------------------------
    def _model(self, name: str) -> Any:
        for model in self._config.models:
            if model.name == name:
                return model
        raise _RefusedError(HTTPStatus.NOT_FOUND, f"unknown model {name!r}")

    def _checked_version(self, model: Any, version: Any) -> str:
        if not isinstance(version, str) or not NAME_PATTERN.match(version):
            raise _RefusedError(HTTPStatus.BAD_REQUEST, f"invalid version name {version!r}")
        try:
            path = version_directory(model.repository, model.name, version)
        except ServinglibError as e:
            raise _RefusedError(HTTPStatus.BAD_REQUEST, str(e)) from e
        if not path.is_dir() and model.repository_url is not None:
            _fetch_from_store(model, version)  # into the cache, before any worker looks
        if not path.is_dir():
            raise _RefusedError(
                HTTPStatus.NOT_FOUND, f"model {model.name!r} has no version directory {version!r}"
            )
        return version

    def status(self) -> dict[str, Any]:
        """The desired state and every live worker's report."""
        return {
            "desired": read_desired_state(self._state_dir).to_json(),
            "workers": {
                str(pid): s
                for pid, s in read_worker_statuses(self._state_dir, self._live_pids()).items()
            },
        }

    def change(self, name: str, version: str, action: str) -> dict[str, Any]:
        """Ask every worker to load or unload a version.

        Refused (409): unloading the default, including one a promotion just made default.
        """
        model = self._model(name)
        version = self._checked_version(model, version)
        with self._model_locks[name]:
            plan = read_desired_state(self._state_dir).plan(name)
            if action == "unload" and version == (plan.default or model.default_version):
                raise _RefusedError(
                    HTTPStatus.CONFLICT,
                    f"{version!r} is the default version of {name!r}; promote another first",
                )
            keep, drop = (plan.load, plan.unload) if action == "load" else (plan.unload, plan.load)
            if version in drop:
                drop.remove(version)
            if version not in keep:
                keep.append(version)
            # A load is a new request: retried by a worker where it FAILED.
            revision = self._commit(model, plan, loaded=version if action == "load" else None)
        return {"revision": revision, "model": name, "version": version, "action": action}

    def move_default(self, name: str, action: str, version: Any) -> dict[str, Any]:
        """Promote a READY version, or roll back to the previous default.

        Refused (409): a target with an unload pending (load it again first), or one not
        READY in every worker at the revision that last asked to load it.
        """
        model = self._model(name)
        if action == "promote":
            version = self._checked_version(model, version)
        with self._model_locks[name]:
            plan = read_desired_state(self._state_dir).plan(name)
            current = plan.default or model.default_version
            if action == "rollback":
                if not plan.previous_defaults:
                    raise _RefusedError(
                        HTTPStatus.CONFLICT,
                        f"model {name!r} has no earlier default to roll back to",
                    )
                target = plan.previous_defaults[-1]
            else:
                target = version
            if target in plan.unload:
                raise _RefusedError(
                    HTTPStatus.CONFLICT,
                    f"version {target!r} of {name!r} has an unload pending; load it again "
                    "(admin load) and wait until it is READY before making it the default",
                )
            self._require_ready_everywhere(name, target, plan.load_revisions.get(target, 0))
            if action == "rollback":
                plan.previous_defaults.pop()
            elif target != current:
                plan.previous_defaults.append(current)
            plan.default = target
            revision = self._commit(model, plan)
        return {"revision": revision, "model": name, "default": target, "previous": current}

    def _commit(self, model: Any, plan: ModelPlan, loaded: str | None = None) -> int:
        """Write ``plan`` as the model's plan at a new revision; returns the revision.

        Called with the model's lock held: only this thread changes that model's plan, so
        the plan read under that lock is still current; the file lock keeps concurrent
        actions on other models from losing each other's plans.
        """
        if plan.unloads_default(model.default_version):  # the invariant, whatever led here
            raise _RefusedError(
                HTTPStatus.CONFLICT,
                f"this would unload {plan.default or model.default_version!r}, the default "
                f"version of {model.name!r}; promote another first",
            )
        with self._file_lock:
            state = read_desired_state(self._state_dir)
            state.revision += 1
            if loaded is not None:
                plan.load_revisions[loaded] = state.revision
            state.models[model.name] = plan
            write_desired_state(self._state_dir, state)
            return state.revision

    def _require_ready_everywhere(self, model: str, version: str, since: int) -> None:
        """Every live worker reports ``version`` READY, in a report of revision ``since``
        or later (an older report may predate an unload that the load undid)."""
        statuses = read_worker_statuses(self._state_dir, self._live_pids())
        states = {
            str(pid): s.get("models", {})
            .get(model, {})
            .get("versions", {})
            .get(version, {})
            .get("state", "ABSENT")
            if s.get("revision", -1) >= since
            else f"revision {since} not applied yet"
            for pid, s in statuses.items()
        }
        if not states or any(state != "READY" for state in states.values()):
            raise _RefusedError(
                HTTPStatus.CONFLICT,
                f"version {version!r} of {model!r} is not READY in every worker; load it and wait",
                states,
            )


def _fetch_from_store(model: Any, version: str) -> None:
    """Download a version of a URL repository that the cache lacks (admin ``load``).

    Raises:
        _RefusedError: 404 when the store has no such version, 502 when it cannot be read.
    """
    try:
        listing = list_store(model)
        files = listing.versions.get(version)
        if files is None:
            raise _RefusedError(
                HTTPStatus.NOT_FOUND,
                f"{model.repository_url} has no version {version!r}; upload it first",
            )
        fetch_version(model, version, tuple(f[0] for f in files))
    except StoreError as e:
        raise _RefusedError(HTTPStatus.BAD_GATEWAY, str(e)) from e
