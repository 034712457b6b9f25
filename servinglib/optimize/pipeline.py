"""The whole ``servinglib optimize run``: graph optimization → quantization → measurement → report.

1. optional offline graph optimization of the FP32 model (``basic`` by default: the quantizer
   reads it; ONNX Runtime fuses the rest when the served session loads);
2. quantization: one fixed method, or the accuracy-aware search over candidates;
3. measurement of the FP32 original and the chosen INT8 model, side by side: size,
   single-request p50/p95, batched throughput, the metric, batch invariance;
4. budgets; 5. the report (JSON, Markdown, PNG).

Example::

    outcome = optimize_model(
        Path("model.onnx"), Path("int8/model.onnx"),
        validation=Path("validation.npz"),
        settings=OptimizeSettings(metric="accuracy", budgets=Budgets(max_accuracy_loss=0.003)),
    )
    print(outcome.files.markdown.read_text())
"""

from __future__ import annotations

import datetime as dt
import platform
import shutil
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from servinglib.optimize._progress import Progress
from servinglib.optimize._session import open_session
from servinglib.optimize.accuracy import baseline as baseline_value
from servinglib.optimize.budgets import Budgets, check_budgets
from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.graph import GraphResult, optimize_graph
from servinglib.optimize.invariance import DEFAULT_TOLERANCE, check_batch_invariance
from servinglib.optimize.measure import (
    CpuInfo,
    MeasureSettings,
    cpu_info,
    measure_latency,
    measure_throughput,
    model_size_mb,
)
from servinglib.optimize.quantize import QuantizeOptions
from servinglib.optimize.report import ModelFigures, OptimizeReport, ReportFiles, write_report
from servinglib.optimize.samples import (
    SampleSet,
    input_specs,
    load_samples,
    representative_feed,
    stack_feeds,
)
from servinglib.optimize.search import SearchResult, SearchSettings, search_candidates

__all__ = ["OptimizeOutcome", "OptimizeSettings", "optimize_model"]


@dataclass(frozen=True)
class OptimizeSettings:
    """Everything ``optimize_model`` can be told.

    Attributes:
        method: ``auto`` (accuracy-aware search) or a fixed :class:`QuantizeOptions`.
        metric: accuracy, top1, cosine or max-abs-error.
        output: the graph output judged (None: the first).
        budgets: size, latency and accuracy-loss limits; ``max_accuracy_loss`` also bounds
            the search (``auto`` defaults it to 0.01).
        require_invariance: reject candidates that are not batch-invariant.
        graph_level: offline optimization before quantizing (``disable`` to skip).
        measure: how latency and throughput are measured.
        invariance_tolerance: relative deviation still called batch-invariant.
        invariance_batch_size: size of the mixed batches of the invariance check.
        max_samples: at most this many validation/calibration samples are used.
        progress: show a progress bar on stderr.
    """

    method: str | QuantizeOptions = "auto"
    metric: str = "cosine"
    output: str | None = None
    budgets: Budgets = field(default_factory=Budgets)
    require_invariance: bool = False
    graph_level: str = "basic"
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    invariance_tolerance: float = DEFAULT_TOLERANCE
    invariance_batch_size: int = 8
    max_samples: int | None = 1000
    progress: bool = True


@dataclass(frozen=True)
class OptimizeOutcome:
    """The report, where it was written, the optimized model (None if none fits), the verdict."""

    report: OptimizeReport
    files: ReportFiles
    model: Path | None
    passed: bool
    failures: tuple[str, ...]


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("servinglib", "onnxruntime", "onnx", "numpy"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found


def optimize_model(
    source: Path,
    destination: Path,
    *,
    validation: Path,
    calibration: Path | None = None,
    report_dir: Path | None = None,
    settings: OptimizeSettings | None = None,
) -> OptimizeOutcome:
    """Quantize ``source`` into ``destination``, measure both, check budgets, write the report.

    The report goes to ``report_dir`` (default: the directory of ``destination``). A run
    that fits no candidate still writes its report, then ``passed`` is False and
    ``model`` None.

    Raises:
        OptimizeError: unreadable model or samples, missing extras, bad settings.
    """
    settings = settings or OptimizeSettings()
    fixed = settings.method if isinstance(settings.method, QuantizeOptions) else None
    if fixed is None and settings.method != "auto":
        raise OptimizeError(f"method {settings.method!r} is neither 'auto' nor QuantizeOptions")
    progress = Progress(6, enabled=settings.progress)
    try:
        specs = input_specs(source)
        valid = load_samples(validation, specs, settings.max_samples)
        calib = load_samples(calibration, specs, settings.max_samples) if calibration else None
        warnings: list[str] = []
        if (fixed is None or fixed.method == "static") and calib is None:
            calib = valid
            warnings.append(
                "static candidates were calibrated on the validation samples (no --calibration "
                "given): their accuracy may look better than on unseen data"
            )
        progress.step("samples loaded")
        run = _Run(source, destination, valid, calib, settings, fixed, progress)
        graph, search, baseline, optimized = run.execute()
        chosen = search.chosen
        loss = chosen.metric.loss if chosen and chosen.metric else None
        budget_results = (
            check_budgets(
                settings.budgets,
                size_mb=optimized.size_mb,
                latency_ms=optimized.latency.p50_ms,
                loss=loss,
            )
            if optimized is not None
            else []
        )
        failures = [b.describe() for b in budget_results if not b.passed]
        if chosen is None:
            failures.insert(0, "no candidate fits:\n" + search.explain())
        cpu = cpu_info()
        warnings += _warnings(optimized, cpu, settings)
        report = OptimizeReport(
            created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            versions=_versions(),
            machine=cpu,
            settings=_settings_dict(settings, fixed, validation, calibration, valid, calib),
            graph=graph,
            baseline=baseline,
            optimized=optimized,
            chosen=chosen.name if chosen else None,
            metric=settings.metric,
            loss=loss,
            max_loss=run.max_loss,
            metric_detail=dict(chosen.metric.detail) if chosen and chosen.metric else {},
            candidates=tuple(search.candidates),
            budgets=tuple(budget_results),
            warnings=tuple(warnings),
            passed=not failures,
        )
        files = write_report(report, report_dir or destination.parent)
        progress.step("report written")
    finally:
        progress.close()
    return OptimizeOutcome(
        report=report,
        files=files,
        model=destination if chosen else None,
        passed=not failures,
        failures=tuple(failures),
    )


def _warnings(
    optimized: ModelFigures | None, cpu: CpuInfo, settings: OptimizeSettings
) -> list[str]:
    found = []
    if optimized is not None and not optimized.invariance.invariant:
        found.append(
            f"the INT8 model is not batch-invariant: served in a batch, a request's output "
            f"moves by up to {optimized.invariance.worst_relative:.3g} (relative) compared "
            f"with served alone (tolerance {settings.invariance_tolerance:g}); with dynamic "
            "batching prefer a batch-invariant method (dynamic-per-token or static)"
        )
    if not cpu.vnni:
        found.append(
            "this CPU has no VNNI: u8xs8 INT8 kernels may saturate and run slower; "
            "consider --reduce-range"
        )
    return found


@dataclass
class _Run:
    """Graph optimization, search and measurement, in a temporary work directory."""

    source: Path
    destination: Path
    valid: SampleSet
    calib: SampleSet | None
    settings: OptimizeSettings
    fixed: QuantizeOptions | None
    progress: Progress

    @property
    def max_loss(self) -> float | None:
        """The loss bound of the search: the budget, or 0.01 for ``auto``."""
        budget = self.settings.budgets.max_accuracy_loss
        return 0.01 if budget is None and self.fixed is None else budget

    def execute(
        self,
    ) -> tuple[GraphResult | None, SearchResult, ModelFigures, ModelFigures | None]:
        settings = self.settings
        with tempfile.TemporaryDirectory(prefix="servinglib-optimize-") as tmp:
            work = Path(tmp)
            graph: GraphResult | None = None
            start = self.source
            if settings.graph_level != "disable":
                target = work / f"graph-{settings.graph_level}.onnx"
                graph = optimize_graph(self.source, target, level=settings.graph_level)
                start = graph.path
            self.progress.step(f"graph optimization ({settings.graph_level})")
            search = search_candidates(
                start,
                work,
                self.valid,
                self.calib,
                SearchSettings(
                    metric=settings.metric,
                    # a fixed method is always built; its budgets are checked afterwards
                    max_loss=self.max_loss if self.fixed is None else None,
                    max_size_mb=settings.budgets.max_size_mb if self.fixed is None else None,
                    require_invariance=settings.require_invariance,
                    invariance_tolerance=settings.invariance_tolerance,
                    invariance_batch_size=settings.invariance_batch_size,
                    output=settings.output,
                    measure=settings.measure,
                ),
                candidates=None if self.fixed is None else [self.fixed],
                progress=self.progress,
            )
            chosen = search.chosen
            if chosen is not None and chosen.path is not None:
                self.destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(chosen.path, self.destination)
            baseline, optimized = _measure(
                self.source,
                (self.destination, chosen.metric.value) if chosen and chosen.metric else None,
                self.valid,
                search.reference_outputs,
                settings,
                self.progress,
            )
        return graph, search, baseline, optimized


def _measure(
    source: Path,
    optimized: tuple[Path, float] | None,
    valid: SampleSet,
    reference: list[Any],
    settings: OptimizeSettings,
    progress: Progress,
) -> tuple[ModelFigures, ModelFigures | None]:
    """Latency, throughput and invariance of the FP32 and the INT8 model, side by side."""
    measure = settings.measure
    sessions = {"fp32": open_session(source, threads=measure.threads, output=settings.output)}
    if optimized is not None:
        sessions["int8"] = open_session(
            optimized[0], threads=measure.threads, output=settings.output
        )
    feed = representative_feed(valid.feeds)
    latency = measure_latency(sessions, feed, measure)
    progress.step("latency measured")
    batch_feeds = [valid.feeds[i % len(valid)] for i in range(measure.batch_size)]
    throughput = measure_throughput(sessions, stack_feeds(batch_feeds), measure)
    progress.step("throughput measured")
    figures = {}
    for name, session in sessions.items():
        alone = reference if name == "fp32" else session.run_each(valid.feeds)
        invariance = check_batch_invariance(
            session.run_each,
            session.run_batch,
            valid.feeds,
            batch_size=settings.invariance_batch_size,
            tolerance=settings.invariance_tolerance,
            alone=alone,
        )
        figures[name] = ModelFigures(
            path=session.path,
            size_mb=model_size_mb(session.path),
            latency=latency[name],
            throughput=throughput[name],
            metric_value=baseline_value(settings.metric, reference, valid.labels)
            if name == "fp32" or optimized is None
            else optimized[1],
            invariance=invariance,
        )
    return figures["fp32"], figures.get("int8")


def _settings_dict(
    settings: OptimizeSettings,
    fixed: QuantizeOptions | None,
    validation: Path,
    calibration: Path | None,
    valid: SampleSet,
    calib: SampleSet | None,
) -> dict[str, Any]:
    return {
        "mode": "accuracy-aware search" if fixed is None else "fixed method",
        "method": "auto" if fixed is None else fixed.describe(),
        "metric": settings.metric,
        "output": settings.output,
        "graph_level": settings.graph_level,
        "require_invariance": settings.require_invariance,
        "invariance_tolerance": settings.invariance_tolerance,
        "invariance_batch_size": settings.invariance_batch_size,
        "threads": settings.measure.threads,
        "warmup": settings.measure.warmup,
        "iterations": settings.measure.iterations,
        "repeats": settings.measure.repeats,
        "batch_size": settings.measure.batch_size,
        "validation": str(validation),
        "validation_samples": len(valid),
        "calibration": str(calibration) if calibration else None,
        "calibration_samples": len(calib) if calib else 0,
        "budgets": {
            "max_size_mb": settings.budgets.max_size_mb,
            "max_latency_ms": settings.budgets.max_latency_ms,
            "max_accuracy_loss": settings.budgets.max_accuracy_loss,
        },
    }
