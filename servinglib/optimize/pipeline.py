"""The whole ``servinglib optimize run``: graph optimization → quantization → measurement → report.

1. optional offline graph optimization of the FP32 model (``basic`` by default: the quantizer
   reads it; ONNX Runtime fuses the rest when the served session loads);
2. quantization: one fixed method, or the accuracy-aware search over candidates;
3. measurement of the FP32 original and the chosen INT8 model, side by side: size,
   single-request p50/p95, batched throughput, the metric of every output, batch invariance;
4. budgets; 5. the report (JSON, Markdown, PNG).

Without ``calibration``, static candidates are calibrated on half of the validation samples
(every other one) and every candidate is scored on the other half, so no candidate is
judged on the samples it was calibrated on.

Example::

    outcome = optimize_model(
        Path("model.onnx"), Path("int8/model.onnx"),
        validation=Path("validation.npz"),
        settings=OptimizeSettings(metric="auto", budgets=Budgets(max_accuracy_loss=0.003)),
    )
    print(outcome.files.markdown.read_text())
"""

from __future__ import annotations

import datetime as dt
import platform
import tempfile
from dataclasses import dataclass, field, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from servinglib.optimize._files import StagedOutput, copy_model, refuse_overwriting_source
from servinglib.optimize._progress import Progress
from servinglib.optimize._run_warnings import run_warnings
from servinglib.optimize._settings import OptimizeSettings, validate_settings
from servinglib.optimize.budgets import Budgets, check_budgets
from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.figures import measure_models
from servinglib.optimize.graph import GraphResult, optimize_graph
from servinglib.optimize.judging import ALL_OUTPUTS, baselines
from servinglib.optimize.measure import cpu_info
from servinglib.optimize.quantize import QuantizeOptions
from servinglib.optimize.report import (
    ModelFigures,
    OptimizeReport,
    OutputRow,
    ReportFiles,
    write_report,
)
from servinglib.optimize.samples import SampleSet, input_specs, load_labels, load_samples
from servinglib.optimize.search import (
    SearchResult,
    SearchSettings,
    auto_candidates,
    planned_steps,
    search_candidates,
)

__all__ = ["OptimizeOutcome", "OptimizeSettings", "optimize_model"]


@dataclass(frozen=True)
class OptimizeOutcome:
    """The report, where it was written, the optimized model (None unless passed), the verdict."""

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
    labels: Path | None = None,
    report_dir: Path | None = None,
    settings: OptimizeSettings | None = None,
) -> OptimizeOutcome:
    """Quantize ``source`` into ``destination``, measure both, check budgets, write the report.

    ``destination`` is written only when the whole run passed (a chosen candidate within
    every budget): the model is staged next to it and renamed into place at the end, so a
    failed run leaves whatever was there untouched. The report goes to ``report_dir``
    (default: the directory of ``destination``) either way.

    Raises:
        OptimizeError: unreadable model or samples, missing extras, bad settings, or
            ``destination`` naming the source model.
    """
    settings = settings or OptimizeSettings()
    validate_settings(settings)
    refuse_overwriting_source(source, destination)
    fixed = settings.method if isinstance(settings.method, QuantizeOptions) else None
    specs = input_specs(source)
    valid = load_samples(validation, specs, settings.max_samples)
    if labels is not None:
        valid = valid.with_labels(load_labels(labels, len(valid)))
    calib = load_samples(calibration, specs, settings.max_samples) if calibration else None
    warnings: list[str] = []
    if (fixed is None or fixed.method == "static") and calib is None:
        valid, calib, note = _split_halves(valid, static_only=fixed is not None)
        if note:
            warnings.append(note)
    base = [fixed] if fixed is not None else auto_candidates(source, calib is not None)
    search_steps = planned_steps(len(base), SearchSettings())
    progress = Progress(search_steps + 5, enabled=settings.progress)
    finished = False
    try:
        progress.step("samples loaded")
        with StagedOutput(destination, source=source) as staged:
            run = _Run(source, staged.path, valid, calib, settings, fixed, progress)
            graph, search, baseline, optimized = run.execute()
            chosen = search.chosen
            loss = chosen.metric.loss if chosen and chosen.metric else None
            budget_results = (
                check_budgets(
                    _search_budgets(settings, fixed),
                    size_mb=optimized.size_mb,
                    latency_ms=optimized.latency.p50_ms,
                    loss=loss,
                    losses={s.output: s.result.loss for s in chosen.scores} if chosen else None,
                )
                if optimized is not None
                else []
            )
            failures = [b.describe() for b in budget_results if not b.passed]
            if chosen is None:
                failures.insert(0, "no candidate fits:\n" + search.explain())
            if not failures:
                staged.commit()
            if optimized is not None:
                optimized = replace(optimized, path=destination)
        cpu = cpu_info()
        warnings += run_warnings(baseline, optimized, search, cpu, settings)
        deciding = chosen.deciding if chosen else None
        judges = {j.output: j for j in search.judges}
        decider = judges[deciding.output] if deciding else search.judges[0]
        report = OptimizeReport(
            created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            versions=_versions(),
            machine=cpu,
            settings=_settings_dict(settings, fixed, validation, calibration, valid, calib),
            graph=graph,
            baseline=baseline,
            optimized=optimized,
            chosen=chosen.name if chosen else None,
            choice_reason=search.choice_reason,
            metric=decider.metric,
            metric_reason=decider.reason,
            loss=loss,
            max_loss=decider.max_loss if fixed is None else _budget_for(settings, decider.output),
            metric_detail=dict(chosen.metric.detail) if chosen and chosen.metric else {},
            outputs=_output_rows(search, run.fp32_values, settings, fixed),
            weights=chosen.weights if chosen else None,
            candidates=tuple(search.candidates),
            budgets=tuple(budget_results),
            warnings=tuple(warnings),
            passed=not failures,
        )
        files = write_report(report, report_dir or destination.parent)
        progress.step("report written")
        finished = True
    finally:
        progress.close(finished=finished)
    return OptimizeOutcome(
        report=report,
        files=files,
        model=destination if not failures else None,
        passed=not failures,
        failures=tuple(failures),
    )


def _split_halves(
    valid: SampleSet, *, static_only: bool
) -> tuple[SampleSet, SampleSet | None, str]:
    """Calibration and scoring halves of ``valid`` (every other sample), and a note saying so.

    Raises:
        OptimizeError: a fixed static method with fewer than two samples.
    """
    if len(valid) < 2:
        if static_only:
            raise OptimizeError(
                f"{valid.source} holds one sample: static quantization without --calibration "
                "calibrates on half of the validation samples and scores on the other half; "
                "pass --calibration FILE or more validation samples"
            )
        return valid, None, "one validation sample: static candidates skipped (no --calibration)"
    scored, calibrated = valid.every_other(1), valid.every_other(0)
    note = (
        f"no --calibration: static candidates were calibrated on {len(calibrated)} of the "
        f"validation samples and every candidate was scored on the other {len(scored)}; "
        "pass --calibration FILE to score on all of them"
    )
    return scored, calibrated, note


def _search_budgets(settings: OptimizeSettings, fixed: QuantizeOptions | None) -> Budgets:
    """The budgets checked after the search (auto: the loss limit defaults to 0.01)."""
    budgets = settings.budgets
    if fixed is None and budgets.max_accuracy_loss is None:
        return replace(budgets, max_accuracy_loss=0.01)
    return budgets


def _budget_for(settings: OptimizeSettings, output: str) -> float | None:
    limits = dict(settings.budgets.output_losses)
    return limits.get(output, settings.budgets.max_accuracy_loss)


def _output_rows(
    search: SearchResult,
    fp32_values: dict[str, float],
    settings: OptimizeSettings,
    fixed: QuantizeOptions | None,
) -> tuple[OutputRow, ...]:
    chosen = search.chosen
    scores = {s.output: s for s in chosen.scores} if chosen else {}
    rows = []
    for j in search.judges:
        score = scores.get(j.output)
        limit = j.max_loss if fixed is None else _budget_for(settings, j.output)
        loss = score.result.loss if score else None
        rows.append(
            OutputRow(
                output=j.output if j.output != ALL_OUTPUTS else "all outputs",
                metric=j.metric,
                why=j.reason,
                fp32=fp32_values.get(j.output, 0.0),
                optimized=score.result.value if score else None,
                loss=loss,
                max_loss=limit,
                passed=None if loss is None else bool(limit is None or loss <= limit),
                detail=dict(score.result.detail) if score else {},
            )
        )
    return tuple(rows)


@dataclass
class _Run:
    """Graph optimization, search and measurement, in a temporary work directory."""

    source: Path
    staged: Path
    valid: SampleSet
    calib: SampleSet | None
    settings: OptimizeSettings
    fixed: QuantizeOptions | None
    progress: Progress

    fp32_values: dict[str, float] = field(default_factory=dict)

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
                graph = replace(graph, source=Path(self.source.name), path=Path(target.name))
                start = target
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
                    output_losses=dict(settings.budgets.output_losses)
                    if self.fixed is None
                    else {},
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
                copy_model(chosen.path, self.staged)
            self.fp32_values = baselines(search.judges, search.reference, self.valid.labels)
            deciding = chosen.deciding if chosen else None
            first = deciding.output if deciding else search.judges[0].output
            baseline, optimized = measure_models(
                self.source,
                (self.staged, deciding.result.value) if deciding else None,
                self.valid,
                search,
                settings,
                self.progress,
                fp32_value=self.fp32_values[first],
            )
        return graph, search, baseline, optimized


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
        "validation": validation.name,
        "validation_samples": len(valid),
        "labels": valid.labels is not None,
        "calibration": calibration.name if calibration else None,
        "calibration_samples": len(calib) if calib else 0,
        "budgets": {
            "max_size_mb": settings.budgets.max_size_mb,
            "max_latency_ms": settings.budgets.max_latency_ms,
            "max_accuracy_loss": settings.budgets.max_accuracy_loss,
            "max_accuracy_loss_per_output": dict(settings.budgets.output_losses),
        },
    }
