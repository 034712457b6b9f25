"""``servinglib selftest``: load every version as a worker would, then check what loaded."""

from __future__ import annotations

from dataclasses import dataclass, field

from servinglib.checks.serving import ServingCheck, run_serving_checks
from servinglib.config.spec import ServiceConfig
from servinglib.lifecycle.registry import VersionRecord, VersionState
from servinglib.serving.assembly import Purpose, load_service

__all__ = ["SelftestRun", "run_all_selftests", "run_selftest_suite"]


def run_all_selftests(config: ServiceConfig) -> list[VersionRecord]:
    """Load and self-test every version of every model, as a worker would.

    Composed models call their members through a service's lanes, as in a worker; those
    stay open (idle threads) so the loaded versions can still answer afterwards.
    """
    return load_service(config, Purpose.SELFTEST).records()


@dataclass(frozen=True)
class SelftestRun:
    """Every version's load and self-tests, and the serving checks of those that loaded."""

    records: list[VersionRecord]
    serving: list[ServingCheck] = field(default_factory=list)

    def failed_versions(self) -> list[tuple[str, str]]:
        """``(model, version)`` of each version that failed to load, a self-test or a check."""
        failed = {(r.model, r.version) for r in self.records if r.state is VersionState.FAILED}
        failed |= {(c.model, c.version) for c in self.serving if not c.passed}
        return [(r.model, r.version) for r in self.records if (r.model, r.version) in failed]

    @property
    def passed(self) -> bool:
        """True when no version failed anything."""
        return not self.failed_versions()

    def summary(self) -> str:
        """``2 of 3 version(s) passed; failed: digits 2 (max_latency_ms)``."""
        failed = self.failed_versions()
        text = f"{len(self.records) - len(failed)} of {len(self.records)} version(s) passed"
        if not failed:
            return text
        named = []
        for model, version in failed:
            failing = [
                c.name
                for c in self.serving
                if (c.model, c.version) == (model, version) and not c.passed
            ]
            named.append(f"{model} {version}" + (f" ({', '.join(failing)})" if failing else ""))
        return f"{text}; failed: {', '.join(named)}"


def run_selftest_suite(config: ServiceConfig) -> SelftestRun:
    """Load and self-test every version, then run the serving checks on the READY ones.

    Example::

        run = run_selftest_suite(load_config("servinglib.yaml"))
        print(run.summary())
    """
    records = run_all_selftests(config)
    return SelftestRun(records, run_serving_checks(config, records))
