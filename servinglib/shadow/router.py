"""Shadow traffic: copies of answered requests run on other versions, off the request path.

The primary answers the client first. Then, for each configured shadow whose sample
draw hits, a copy of the decoded request and the primary's output go to a bounded
per-worker executor, which runs it on the shadow version's own executor in the worker
(``isolation: thread``) or in the worker's shadow process (``isolation: process``).
When the executor and its queue are full, the copy is dropped and counted; nothing
waits. Shadow exceptions and timeouts are logged and counted, and can never change the
primary's status or body.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol

from servinglib.config.spec import ShadowConfig, ShadowExecutorConfig
from servinglib.errors import (
    DeadlineExceededError,
    OverloadedError,
    ServinglibError,
)
from servinglib.lifecycle.registry import ModelRegistry
from servinglib.serving import tracing
from servinglib.serving.recording import AnsweredPrediction, AnswerRecorder
from servinglib.shadow.budget import CpuBudget
from servinglib.shadow.comparators import Comparator, Comparison, make_comparator
from servinglib.shadow.copies import ShadowCopy
from servinglib.shadow.process import ShadowProcess

__all__ = [
    "Comparison",
    "ShadowListener",
    "ShadowRouter",
    "make_comparator",
]

log = logging.getLogger("servinglib.shadow.router")


class ShadowListener(Protocol):
    """Told what happened to each shadow copy; the metrics layer implements it."""

    def shadow_dropped(self, model: str, primary: str, shadow: str) -> None:
        """The executor was full: the copy was not run."""

    def shadow_shed(self, model: str, primary: str, shadow: str) -> None:
        """The shadows' CPU budget was spent: the copy was not run."""

    def shadow_finished(
        self, model: str, primary: str, shadow: str, outcome: str, seconds: float
    ) -> None:
        """A copy ran: ``outcome`` is ok, error, timeout, refused or not_ready.

        refused: the shadow version is READY but its queue turned the copy away (full, or
        the copy could not finish within ``timeout_ms``); not_ready: it cannot answer.
        """

    def shadow_compared(
        self, model: str, primary: str, shadow: str, comparison: Comparison
    ) -> None:
        """A shadow answer was compared with the primary's."""


WARNING_INTERVAL_S = 60.0  # at most one warning per shadow and outcome this often


class _RateLimitedWarnings:
    """One warning per (model, version, outcome) per interval, with how many it stands for.

    Under load a refused, late or unready shadow would otherwise write a line per copy
    (not compared); the counter ``servinglib_shadow_requests_total`` has every one.
    """

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._next: dict[tuple[str, str, str], float] = {}
        self._quiet: dict[tuple[str, str, str], int] = {}

    def warn(self, model: str, version: str, outcome: str, message: str, error: object) -> None:
        key = (model, version, outcome)
        now = self._clock()
        with self._lock:
            if now < self._next.get(key, -math.inf):
                self._quiet[key] = self._quiet.get(key, 0) + 1
                return
            self._next[key] = now + self._interval_s
            quiet = self._quiet.pop(key, 0)
        suffix = (
            f" ({quiet} more {outcome} cop{'y' if quiet == 1 else 'ies'} in the last "
            f"{self._interval_s:g} s not logged)"
            if quiet
            else ""
        )
        log.warning(message + "%s", model, version, error, suffix)


ShadowCall = Callable[[str, str, Any, float], Any]
"""``(model, version, features, timeout_s) -> answer``: a call on the version's executor."""


@dataclass(frozen=True)
class _Shadow:
    config: ShadowConfig
    compare: Comparator


class ShadowRouter:
    """Runs sampled shadow copies on a bounded executor and reports every outcome.

    Example::

        router = ShadowRouter(registry, listener=metrics)
        router.submit(ShadowCopy("eta", "2", features, primary_output, request_id))
    """

    def __init__(
        self,
        registry: ModelRegistry,
        listener: ShadowListener | None = None,
        recorder: AnswerRecorder | None = None,
        executor: ShadowExecutorConfig | None = None,
        rng: Callable[[], float] = random.random,
    ) -> None:
        config = registry.config
        self.run_on: ShadowCall | None = None  # the version's executor, once the service is up
        bounds = executor or config.shadow_executor
        self._registry = registry
        self._listener = listener
        self._recorder = recorder
        self._rng = rng
        self._shadows: dict[str, list[_Shadow]] = {}
        for name in registry.model_names():
            model = registry.model_config(name)
            self._shadows[name] = [
                _Shadow(s, make_comparator(s.comparator, config.root, config.python_path))
                for s in model.shadows
            ]
        self.enabled = any(self._shadows.values())
        self._slots = threading.BoundedSemaphore(bounds.max_concurrency + bounds.max_queue)
        self._executor = ThreadPoolExecutor(
            bounds.max_concurrency, thread_name_prefix="servinglib-shadow"
        )
        self._pending: set[Future[None]] = set()
        self._pending_lock = threading.Lock()
        self._warnings = _RateLimitedWarnings(WARNING_INTERVAL_S)
        self._budget: CpuBudget | None = None
        if bounds.max_cpu_share is not None:
            self._budget = CpuBudget(bounds.max_cpu_share)
        self._process: ShadowProcess | None = None
        if self.enabled and bounds.isolation == "process":
            self._process = ShadowProcess(
                config.source,
                kill_margin_s=config.server.watchdog_margin_s,
                on_cpu=None if self._budget is None else self._budget.spend,
            )
            self._process.start()

    def wait_ready(self) -> None:
        """With ``isolation: process``: wait until the shadow process has loaded its versions.

        Bounded by the shadowed models' ``load_timeout_s``; copies meanwhile count as
        ``not_ready``.
        """
        if self._process is None:
            return
        config = self._registry.config
        budget = sum(m.load_timeout_s for m in config.models for _ in m.shadows)
        if not self._process.wait_loaded(budget):
            log.warning("the shadow process did not load its versions; copies are not_ready")

    def submit(self, copy: ShadowCopy) -> None:
        """Copy an answered request to the sampled shadows of its model; never blocks."""
        model, primary = copy.model, copy.primary
        for shadow in self._shadows.get(model, ()):
            version = shadow.config.version
            if version == primary or self._rng() >= shadow.config.sample_rate:
                continue
            if self._budget is not None and not self._budget.admit():
                if self._listener:
                    self._listener.shadow_shed(model, primary, version)
                continue
            if not self._slots.acquire(blocking=False):
                if self._listener:
                    self._listener.shadow_dropped(model, primary, version)
                continue
            try:
                future = self._executor.submit(self._run, shadow, copy)
            except RuntimeError:  # executor shut down: the worker is exiting
                self._slots.release()
                if self._listener:
                    self._listener.shadow_dropped(model, primary, version)
                continue
            with self._pending_lock:
                self._pending.add(future)
            future.add_done_callback(self._forget)

    def _forget(self, future: Future[None]) -> None:
        with self._pending_lock:
            self._pending.discard(future)

    def _run(self, shadow: _Shadow, copy: ShadowCopy) -> None:
        model, primary, features = copy.model, copy.primary, copy.features
        version = shadow.config.version
        started = time.perf_counter()
        outcome = "ok"
        span = None
        if copy.trace is not None and tracing.ACTIVE is not None:
            span = tracing.ACTIVE.linked(
                f"shadow {version}",
                copy.trace,
                {"servinglib.model": model, "servinglib.version": version},
            )
        try:
            timeout_s = shadow.config.timeout_ms / 1000
            if self._process is not None:  # a process of its own: no CPU taken from the primary
                answer = self._process.call(model, version, features, timeout_s)
            elif self.run_on is not None:  # the version's own threads: instances stay exclusive
                answer = self.run_on(model, version, features, timeout_s)
            else:
                instance = self._registry.get(model, version).instance
                answer = instance.predict(instance.prepare(features))
            elapsed = time.perf_counter() - started
            if elapsed * 1000 > shadow.config.timeout_ms:
                outcome = "timeout"
                late = f"took {elapsed * 1000:.0f} ms (timeout {shadow.config.timeout_ms} ms)"
                self._warnings.warn(
                    model, version, outcome, "shadow %r version %r %s; not compared", late
                )
                return
            comparison = shadow.compare(copy.output, answer)
            if self._listener:
                self._listener.shadow_compared(model, primary, version, comparison)
            if self._recorder and copy.log_answer:  # logged with its primary, under its sampling
                self._recorder.record(
                    AnsweredPrediction(
                        copy.request_id,
                        model,
                        version,
                        features,
                        answer,
                        elapsed * 1000,
                        *tracing.trace_ids_of(copy.trace, span),  # under the copy's own span
                        shadow_of=primary,
                    )
                )
        except DeadlineExceededError:
            outcome = "timeout"
            late = f"did not answer within {shadow.config.timeout_ms} ms"
            self._warnings.warn(
                model, version, outcome, "shadow %r version %r %s; not compared", late
            )
        except OverloadedError as e:  # READY, but its queue turned the copy away
            outcome = "refused"
            self._warnings.warn(
                model, version, outcome, "shadow %r version %r refused a copy: %s", e
            )
        except ServinglibError as e:
            outcome = "not_ready"
            self._warnings.warn(
                model, version, outcome, "shadow %r version %r cannot answer: %s", e
            )
        except Exception:
            outcome = "error"
            log.warning(
                "shadow %r version %r raised (request %s)",
                model,
                version,
                copy.request_id,
                exc_info=True,
            )
        finally:
            if span is not None:
                span.set_attribute("servinglib.outcome", outcome)
                span.end()
            self._slots.release()
            if self._budget is not None and self._process is None:  # interpreter-lock time
                self._budget.spend(time.perf_counter() - started)
            if self._listener:
                self._listener.shadow_finished(
                    model, primary, version, outcome, time.perf_counter() - started
                )

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop accepting copies and wait up to ``timeout_s`` for those already accepted."""
        self._executor.shutdown(wait=False)
        with self._pending_lock:
            pending = set(self._pending)
        if pending:
            wait(pending, timeout=timeout_s)
        if self._process is not None:
            self._process.close()
