"""Checks of loaded versions beyond their self-tests: batch invariance and optimize budgets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servinglib.config.spec import ServiceConfig
from servinglib.lifecycle.registry import VersionRecord, VersionState
from servinglib.lifecycle.selftest import load_test_data

__all__ = ["ServingCheck", "run_serving_checks"]


@dataclass(frozen=True)
class ServingCheck:
    """One check of one READY version: ``name`` is ``batch invariance`` or a budget key."""

    model: str
    version: str
    name: str
    passed: bool
    message: str

    def line(self) -> str:
        """``digits 2: max_latency_ms: 3.1 <= 15 (ok)``."""
        return f"{self.model} {self.version}: {self.message}"


def run_serving_checks(
    config: ServiceConfig, records: Sequence[VersionRecord], *, budget_runs: int = 10
) -> list[ServingCheck]:
    """Batch invariance of batched models and ``optimize_budgets``, on the self-test inputs."""
    from servinglib.optimize.budgets import budgets_for_model, check_served_version
    from servinglib.optimize.invariance import check_model_batch_invariance

    models = {model.name: model for model in config.models}
    checks: list[ServingCheck] = []
    for record in records:
        if record.state is not VersionState.READY or record.instance is None:
            continue
        inputs = [case.input for case in load_test_data(record.path)]
        if not inputs:
            continue
        if models[record.model].batching is not None and len(inputs) > 1:
            result = check_model_batch_invariance(record.instance, inputs)
            verdict = "batch-invariant" if result.invariant else "NOT batch-invariant"
            message = (
                f"{verdict} (worst relative deviation {result.worst_relative:.2e}, "
                f"tolerance {result.tolerance:.0e})"
            )
            checks.append(
                ServingCheck(
                    record.model, record.version, "batch invariance", result.invariant, message
                )
            )
        budgets = budgets_for_model(config, record.model)
        for budget in check_served_version(
            record.instance, record.path, inputs, budgets, runs=budget_runs
        ):
            checks.append(
                ServingCheck(
                    record.model, record.version, budget.budget, budget.passed, budget.describe()
                )
            )
    return checks
