"""The persisted state of one model's rollout: where it stands and the evidence it saw.

One JSON file per model in the policy's ``state_dir``, replaced atomically after every
evaluation, so a master restart (or a ``kill -9``) resumes from the step it was on. Beside
it, ``<model>.evidence.jsonl`` gets one line per evaluation: the window counts of
baseline, candidate and shadow and the verdicts. The readout
(:mod:`servinglib.delivery.report`) re-runs the gates on them and reproduces every
decision.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servinglib.lifecycle.rollout import write_atomically

__all__ = [
    "ABORTED",
    "ACTIVE",
    "PAUSED",
    "PROMOTED",
    "ROLLED_BACK",
    "RUNNING",
    "TERMINAL",
    "RolloutState",
    "append_evidence",
    "evidence_path",
    "load_state",
    "read_evidence",
    "reset_evidence",
    "save_state",
    "state_path",
]

RUNNING, PAUSED = "running", "paused"
PROMOTED, ROLLED_BACK, ABORTED = "promoted", "rolled_back", "aborted"
ACTIVE = frozenset({RUNNING, PAUSED})
TERMINAL = frozenset({PROMOTED, ROLLED_BACK, ABORTED})


@dataclass
class RolloutState:
    """Where one rollout stands."""

    model: str
    candidate: str
    baseline: str
    status: str = RUNNING
    step: int = 0
    step_started: float = 0.0  # wall time the step began (survives restarts)
    window_start: dict[str, Any] | None = None  # the Snapshot the step's window starts at
    looks: int = 0  # tests run in this step's window so far (see LOOKS_PER_STEP)
    gates: list[dict[str, Any]] = field(default_factory=list)  # the latest verdicts
    decisions: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (a shallow copy: the fields are JSON values already)."""
        return dict(vars(self))

    def summary(self) -> dict[str, Any]:
        """What ``/models`` and ``rollout status`` show: all but the window start, 10 decisions."""
        out = self.to_json()
        out.pop("window_start")
        out["decisions"] = self.decisions[-10:]
        return out


def state_path(directory: Path, model: str) -> Path:
    """The state file of ``model``."""
    return directory / f"{model}.json"


def load_state(directory: Path, model: str) -> RolloutState | None:
    """The persisted state of ``model``'s rollout (None when there is none)."""
    path = state_path(directory, model)
    if not path.is_file():
        return None
    raw = json.loads(path.read_text(encoding="utf-8"))
    return RolloutState(**raw)


def save_state(directory: Path, state: RolloutState) -> None:
    """Replace the state file atomically (readers see the old or the new one)."""
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(state_path(directory, state.model), state.to_json())


def evidence_path(directory: Path, model: str) -> Path:
    """The evidence file of ``model``: one JSON line per evaluation."""
    return directory / f"{model}.evidence.jsonl"


def append_evidence(directory: Path, model: str, entry: dict[str, Any]) -> None:
    """Add one evaluation to the evidence file."""
    directory.mkdir(parents=True, exist_ok=True)
    with evidence_path(directory, model).open("a", encoding="utf-8") as out:
        out.write(json.dumps(entry) + "\n")


def reset_evidence(directory: Path, model: str) -> None:
    """Start an empty evidence file (a new candidate)."""
    evidence_path(directory, model).unlink(missing_ok=True)


def read_evidence(directory: Path, model: str) -> list[dict[str, Any]]:
    """Every evaluation persisted for ``model`` (a torn last line, from a kill, is skipped)."""
    path = evidence_path(directory, model)
    if not path.is_file():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries
