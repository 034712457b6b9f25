"""The rollout controller: walks a candidate through its steps on measured evidence.

It runs in the gunicorn master, next to the admin API, and acts only through it (the
desired-state file every worker converges to): load the candidate, set each step's
traffic split, roll back (the candidate's traffic to 0, left loaded), promote. Every
evaluation is persisted (:mod:`servinglib.lifecycle.rollout_state`) before the next one, and every
action is idempotent, so a worker killed with ``-9`` or a master restarted mid-rollout
changes nothing but the window: the rollout resumes from its step.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from servinglib.config.rollout_policy import RolloutPolicy, RolloutStep
from servinglib.config.spec import ServiceConfig
from servinglib.delivery.evidence import Snapshot, read_snapshots
from servinglib.delivery.gates import FAIL, PASS, UNKNOWN, GateResult, evaluate_gates, look_due
from servinglib.lifecycle.rollout_state import (
    ABORTED,
    ACTIVE,
    PAUSED,
    PROMOTED,
    ROLLED_BACK,
    RUNNING,
    TERMINAL,
    RolloutState,
    append_evidence,
    load_state,
    reset_evidence,
    save_state,
)

__all__ = ["Actions", "CommandRefusedError", "RolloutController", "step_weights"]

log = logging.getLogger("servinglib.delivery")


class CommandRefusedError(Exception):
    """An operator command that does not apply to the rollout's current status."""


class Actions(Protocol):
    """What the controller may do: the admin API's operations, all idempotent."""

    def default_version(self, model: str) -> str:
        """The current default version."""

    def ensure_loaded(self, model: str, version: str) -> None:
        """Ask every worker to load ``version`` (nothing when already asked)."""

    def ready_states(self, model: str, version: str) -> dict[str, str]:
        """Worker pid -> state of ``version`` (READY, FAILED, LOADING...)."""

    def set_traffic(self, model: str, weights: dict[str, float]) -> None:
        """Set the traffic split of ``model`` in every worker (nothing when unchanged)."""

    def promote(self, model: str, version: str) -> None:
        """Make ``version`` the default in every worker (nothing when it already is)."""


class Listener(Protocol):
    """Told about decisions (the Prometheus metrics implement it)."""

    def rollout_decided(self, model: str, candidate: str, action: str, step: int) -> None:
        """``action`` (start, advance, promote, rollback, pause, resume, abort) happened."""


class Readings(Protocol):
    """Takes the drift and query readings a policy's gates need (see custom_gates)."""

    def __call__(
        self, policy: RolloutPolicy, model: str, baseline: str, candidate: str
    ) -> dict[str, Any]:
        """JSON-ready readings of this evaluation."""


ReadSnapshots = Callable[[Sequence[str]], Mapping[str, Snapshot]]


class _TickReads:
    """The snapshots of one tick, read on first use, for every model at once (a finished
    rollout reads nothing)."""

    def __init__(self, read: ReadSnapshots, models: Sequence[str]) -> None:
        self._read = read
        self._models = models
        self._snapshots: Mapping[str, Snapshot] | None = None

    def __call__(self, model: str) -> Snapshot:
        if self._snapshots is None:
            self._snapshots = self._read(self._models)
        return self._snapshots[model]


def step_weights(baseline: str, candidate: str, step: RolloutStep) -> dict[str, float]:
    """The traffic split of ``step``: the candidate's weight %, the rest to the baseline."""
    if step.weight >= 100:
        return {candidate: 100.0}
    return {baseline: 100.0 - step.weight, candidate: step.weight}


class RolloutController:
    """Evaluates every model's rollout each ``interval_s`` and acts on the verdicts.

    Example::

        controller = RolloutController(config, actions)
        controller.start()
        controller.command("eta", "pause")
    """

    def __init__(
        self,
        config: ServiceConfig,
        actions: Actions,
        listener: Listener | None = None,
        read: ReadSnapshots = read_snapshots,
        clock: Callable[[], float] = time.time,
        readings: Readings | None = None,
    ) -> None:
        self.policies: dict[str, RolloutPolicy] = {
            m.name: m.rollout for m in config.models if m.rollout is not None
        }
        self._actions = actions
        self._listener = listener
        self._read = read
        self._clock = clock
        if readings is None:
            from servinglib.delivery.external import ExternalReadings

            readings = ExternalReadings(config)
        self._readings = readings
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="servinglib-delivery", daemon=True)

    # --- the loop ------------------------------------------------------------------------
    def start(self) -> None:
        """Evaluate in a background thread until :meth:`stop`."""
        if self.policies:
            self._thread.start()

    def stop(self) -> None:
        """Stop evaluating (the state stays persisted)."""
        self._stop.set()

    def _loop(self) -> None:
        interval = min(p.interval_s for p in self.policies.values())
        while not self._stop.wait(interval):
            reads = _TickReads(self._read, list(self.policies))
            for model in self.policies:
                try:
                    self.tick(model, reads)
                except Exception:  # the next tick retries; the master must not die
                    log.exception("rollout of %r: evaluation failed", model)

    def state(self, model: str) -> RolloutState:
        """The persisted state of ``model``'s rollout (a fresh one for a new candidate)."""
        policy = self.policies[model]
        state = load_state(policy.state_dir, model)
        if state is None or state.candidate != policy.candidate:
            baseline = self._actions.default_version(model)
            state = RolloutState(model, policy.candidate, baseline, step_started=self._clock())
            reset_evidence(policy.state_dir, model)
            self._decide(state, "start", f"candidate {policy.candidate!r} against {baseline!r}")
            save_state(policy.state_dir, state)
        return state

    def tick(self, model: str, reads: Callable[[str], Snapshot] | None = None) -> RolloutState:
        """One evaluation of ``model``'s rollout, and the action it calls for; ``reads``:
        the snapshots of this tick, shared by every model (default: read ``model`` now)."""
        with self._lock:
            policy = self.policies[model]
            state = self.state(model)
            self._actions.ensure_loaded(model, state.candidate)
            if state.status not in ACTIVE:
                self._converge_finished(state)
            elif self._candidate_ready(state):
                self._evaluate(policy, state, reads or _TickReads(self._read, [model]))
            save_state(policy.state_dir, state)
            return state

    def _candidate_ready(self, state: RolloutState) -> bool:
        states = self._actions.ready_states(state.model, state.candidate)
        if states and all(s == "READY" for s in states.values()):
            return True
        self._actions.set_traffic(state.model, {state.baseline: 100.0})
        if states and all(s == "FAILED" for s in states.values()):
            self._roll_back(state, "the candidate failed to load in every worker")
        return False

    def _evaluate(
        self, policy: RolloutPolicy, state: RolloutState, reads: Callable[[str], Snapshot]
    ) -> None:
        step = policy.steps[state.step]
        self._actions.set_traffic(state.model, step_weights(state.baseline, state.candidate, step))
        now = reads(state.model)
        if state.window_start is None:
            state.window_start = now.to_json()
            return
        start = Snapshot.from_json(state.window_start)
        base = now.version(state.baseline).minus(start.version(state.baseline))
        cand = now.version(state.candidate).minus(start.version(state.candidate))
        shadow = now.shadow(state.candidate).minus(start.shadow(state.candidate))
        if base is None or cand is None or shadow is None:
            state.window_start = now.to_json()
            state.looks = 0
            self._note(state, "window restarted: the counters were reset (a master restart)")
            return
        bounds = sorted({le for c in now.versions.values() for le in c.buckets})
        due = look_due(step, shadow.comparisons if step.shadow else cand.requests, state.looks)
        look = due > state.looks
        external = (
            {}
            if step.shadow
            else self._readings(policy, state.model, state.baseline, state.candidate)
        )
        results = evaluate_gates(policy, step, base, cand, shadow, bounds, look, external)
        state.looks = max(state.looks, due)
        state.gates = [r.to_json() for r in results]
        append_evidence(
            policy.state_dir,
            state.model,
            {
                "t": now.t,
                "step": state.step,
                "look": look,
                "bounds": [repr(b) for b in bounds],
                "baseline": base.to_json(),
                "candidate": cand.to_json(),
                "shadow": shadow.to_json(),
                "gates": state.gates,
                "external": external,
            },
        )
        failed = [r for r in results if r.verdict == FAIL]
        unknown = [r for r in results if r.verdict == UNKNOWN]
        if failed:
            self._roll_back(state, "; ".join(f"{r.gate}: {r.reason}" for r in failed))
        elif unknown and state.status == RUNNING:
            # Never promote on missing evidence: hold the step until an operator resumes.
            state.status = PAUSED
            reasons = "; ".join(f"{r.gate}: {r.reason}" for r in unknown)
            self._decide(state, "pause", f"evidence missing, resume when fixed ({reasons})")
        elif state.status == RUNNING and self._step_done(step, state, results, now.t):
            reasons = "; ".join(f"{r.gate}: {r.reason}" for r in results) or "no gate applies"
            self._advance(policy, state, now, reasons)

    @staticmethod
    def _step_done(
        step: RolloutStep, state: RolloutState, results: list[GateResult], now: float
    ) -> bool:
        return now - state.step_started >= step.min_seconds and all(
            r.verdict == PASS for r in results
        )

    # --- actions -------------------------------------------------------------------------
    def _advance(
        self, policy: RolloutPolicy, state: RolloutState, now: Snapshot, reasons: str
    ) -> None:
        if state.step + 1 < len(policy.steps):
            state.step += 1
            state.step_started = self._clock()
            state.window_start = now.to_json()
            state.looks = 0
            weights = step_weights(state.baseline, state.candidate, policy.steps[state.step])
            self._actions.set_traffic(state.model, weights)
            self._decide(state, "advance", f"step {state.step - 1} passed ({reasons})")
        else:
            self._promote(state, f"every step passed ({reasons})")

    def _promote(self, state: RolloutState, reason: str) -> None:
        self._actions.promote(state.model, state.candidate)
        self._actions.set_traffic(state.model, {state.candidate: 100.0})
        state.status = PROMOTED
        self._decide(state, "promote", reason)

    def _roll_back(self, state: RolloutState, reason: str) -> None:
        self._actions.set_traffic(state.model, {state.baseline: 100.0})
        state.status = ROLLED_BACK
        self._decide(state, "rollback", reason, logging.WARNING)

    def _converge_finished(self, state: RolloutState) -> None:
        """After a restart the workers start from the config: apply the outcome again."""
        if state.status != PROMOTED:
            self._actions.set_traffic(state.model, {state.baseline: 100.0})
            return
        states = self._actions.ready_states(state.model, state.candidate)
        if states and all(s == "READY" for s in states.values()):
            if self._actions.default_version(state.model) != state.candidate:
                self._actions.promote(state.model, state.candidate)
            self._actions.set_traffic(state.model, {state.candidate: 100.0})

    def _decide(
        self, state: RolloutState, action: str, reason: str, level: int = logging.INFO
    ) -> None:
        state.decisions.append(
            {"t": self._clock(), "step": state.step, "action": action, "reason": reason}
        )
        log.log(
            level,
            "rollout of %r: %s (step %d): %s",
            state.model,
            action,
            state.step,
            reason,
            extra={
                "event": f"rollout_{action}",
                "model": state.model,
                "candidate": state.candidate,
                "baseline": state.baseline,
                "step": state.step,
            },
        )
        if self._listener is not None:
            self._listener.rollout_decided(state.model, state.candidate, action, state.step)

    def _note(self, state: RolloutState, reason: str) -> None:
        self._decide(state, "note", reason)

    def _restart(self, policy: RolloutPolicy, old: RolloutState) -> RolloutState:
        """A new rollout of the same candidate: step 0, new window, evidence reset."""
        baseline = self._actions.default_version(old.model)
        state = RolloutState(old.model, old.candidate, baseline, step_started=self._clock())
        reset_evidence(policy.state_dir, old.model)
        ended = old.decisions[-1]["reason"] if old.decisions else ""
        self._decide(state, "restart", f"restarted by the operator after {old.status} ({ended})")
        return state

    # --- operator commands ---------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Every rollout's summary: status, step, latest gate verdicts, recent decisions."""
        with self._lock:
            return {model: self.state(model).summary() for model in self.policies}

    def command(self, model: str, action: str) -> dict[str, Any]:
        """``pause``, ``resume``, ``abort``, ``promote`` (now, skipping the other steps) or
        ``restart`` (a rolled-back or aborted rollout, from step 0 with fresh evidence).

        Raises:
            KeyError: the model has no rollout policy.
            CommandRefusedError: the command does not apply to the current status.
        """
        with self._lock:
            policy = self.policies[model]
            state = self.state(model)
            allowed = {
                "pause": {RUNNING},
                "resume": {PAUSED},
                "abort": ACTIVE,
                "promote": ACTIVE,
                "restart": TERMINAL - {PROMOTED},
            }
            if action not in allowed:
                raise CommandRefusedError(f"unknown rollout command {action!r}")
            if state.status not in allowed[action]:
                raise CommandRefusedError(
                    f"the rollout of {model!r} is {state.status}; {action} applies to a "
                    f"rollout that is {' or '.join(sorted(allowed[action]))}"
                )
            if action == "restart":
                state = self._restart(policy, state)
            elif action == "promote":
                self._promote(state, "promoted by the operator")
            elif action == "abort":
                self._actions.set_traffic(model, {state.baseline: 100.0})
                state.status = ABORTED
                self._decide(state, "abort", "aborted by the operator", logging.WARNING)
            else:
                state.status = PAUSED if action == "pause" else RUNNING
                self._decide(state, action, f"{action}d by the operator")
            save_state(policy.state_dir, state)
            return state.summary()
