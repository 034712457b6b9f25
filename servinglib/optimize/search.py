"""Accuracy-aware search: try quantization candidates, keep the best within the loss budget.

Candidates, in order:

1. ``dynamic`` (per-tensor weights), 2. ``dynamic per-channel``,
3. ``dynamic-per-token per-channel`` (when the graph has MatMul/Gemm),
4. ``static`` and 5. ``static per-channel`` (when calibration samples are given).

Each is quantized, scored on the validation samples (each sample run alone, as a lone
request is served) and checked for batch invariance. Every output is judged
(:mod:`servinglib.optimize.judging`): a candidate is *accepted* when the loss of each output
is a finite number within its budget, its size within ``max_size_mb`` and, if
``require_invariance``, it is batch-invariant (a FP32 model that is not batch-invariant
itself widens the tolerance by 1.25x its own deviation: quantization is not blamed for it).
When none is accepted, the least lossy candidate is retried with its most sensitive nodes
left in float (1, 2, 4, 8, ... nodes, see :mod:`servinglib.optimize.sensitivity`; every
op type the method quantized is ranked, embedding ``Gather`` included) until one is
accepted; only nodes that method actually quantized are candidates for exclusion.
Excluding nodes only costs speed and size, so this runs only when no fully quantized
candidate holds the budget.

Among accepted candidates, latency decides only where the rounds can tell
(:mod:`servinglib.optimize._choice`). When none is accepted the result says why for each.

Example::

    result = search_candidates(model, work_dir, validation, calibration, settings)
    if result.chosen is None:
        print(result.explain())
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from servinglib.optimize._choice import auto_candidates, pick_candidate
from servinglib.optimize._files import model_size_mb
from servinglib.optimize._progress import Progress
from servinglib.optimize._session import Session, open_session
from servinglib.optimize.accuracy import MetricResult
from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.invariance import (
    DEFAULT_TOLERANCE,
    InvarianceResult,
    check_batch_invariance,
)
from servinglib.optimize.judging import (
    OutputJudge,
    Outputs,
    OutputScore,
    by_output,
    judge,
    parse_metric_spec,
    plan_judges,
    refuse_non_finite_outputs,
)
from servinglib.optimize.measure import LatencyStats, MeasureSettings, measure_latency
from servinglib.optimize.quantize import QuantizeOptions, quantize_model
from servinglib.optimize.samples import SampleSet, representative_feed
from servinglib.optimize.sensitivity import changed_nodes, rank_sensitive_nodes
from servinglib.optimize.weights import WeightShare, weight_share

__all__ = [
    "CandidateResult",
    "SearchResult",
    "SearchSettings",
    "auto_candidates",
    "pick_candidate",
    "planned_steps",
    "search_candidates",
]

_EXCLUSION_COUNTS = (1, 2, 4, 8, 16, 32)
FP32_DEVIATION_ALLOWANCE = 1.25  # x the FP32 model's own batch deviation, not blamed on INT8


@dataclass(frozen=True)
class SearchSettings:
    """What the search optimizes for.

    Attributes:
        metric: one of :data:`servinglib.optimize.accuracy.METRICS` (``auto``: chosen per
            output from the FP32 outputs), ``module:function``, or ``name=metric`` pairs
            (see :func:`servinglib.optimize.judging.parse_metric_spec`).
        max_loss: largest allowed loss of each output (None: any finite loss).
        output_losses: largest allowed loss of the outputs named, overriding ``max_loss``.
        max_size_mb: largest allowed file size (None: any size).
        require_invariance: reject candidates that are not batch-invariant.
        invariance_tolerance: relative deviation still called invariant.
        invariance_batch_size: size of the mixed batches of the invariance check.
        max_excluded: most sensitive nodes that may be left in float.
        output: the graph outputs judged (None: every output).
        measure: latency settings used to rank accepted candidates.
    """

    metric: str = "auto"
    max_loss: float | None = 0.01
    output_losses: Mapping[str, float] = field(default_factory=dict)
    max_size_mb: float | None = None
    require_invariance: bool = False
    invariance_tolerance: float = DEFAULT_TOLERANCE
    invariance_batch_size: int = 8
    max_excluded: int = 8
    output: str | Sequence[str] | None = None
    measure: MeasureSettings = field(default_factory=MeasureSettings)


@dataclass
class CandidateResult:
    """One candidate: its options, size, scores per output, invariance, latency and verdict."""

    name: str
    options: QuantizeOptions
    path: Path | None = None
    size_mb: float | None = None
    scores: list[OutputScore] = field(default_factory=list)
    weights: WeightShare | None = None
    invariance: InvarianceResult | None = None
    latency: LatencyStats | None = None
    accepted: bool = False
    reasons: list[str] = field(default_factory=list)
    comparison: str | None = None

    @property
    def deciding(self) -> OutputScore | None:
        """The score closest to (or furthest over) its budget: the output that decides."""
        return max(self.scores, key=lambda s: s.pressure) if self.scores else None

    @property
    def metric(self) -> MetricResult | None:
        """The deciding output's metric result (None when not scored)."""
        deciding = self.deciding
        return deciding.result if deciding else None

    @property
    def pressure(self) -> float:
        """The worst loss relative to its budget over every output (inf: not scored)."""
        deciding = self.deciding
        return deciding.pressure if deciding else math.inf


@dataclass
class SearchResult:
    """Every candidate tried, the chosen one (None when none fits) and the FP32 reference."""

    candidates: list[CandidateResult]
    chosen: CandidateResult | None
    reference_outputs: list[tuple[np.ndarray, ...]]
    judges: list[OutputJudge] = field(default_factory=list)
    choice_reason: str = ""
    fp32_invariance: InvarianceResult | None = None
    outputs: tuple[str, ...] = ()

    @property
    def reference(self) -> Outputs:
        """The FP32 outputs, one list of per-sample arrays per judged output."""
        return by_output(self.outputs, self.reference_outputs)

    @property
    def metric(self) -> str:
        """The metrics, e.g. ``top1`` or ``class_logits=top1, amount=relative-error``."""
        if len(self.judges) == 1:
            return self.judges[0].metric
        return ", ".join(f"{j.output}={j.metric}" for j in self.judges)

    @property
    def metric_reason(self) -> str:
        """Why each metric was chosen."""
        return "; ".join(j.reason for j in self.judges)

    def explain(self) -> str:
        """One line per candidate: name, loss and why it was rejected or accepted."""
        lines = []
        for c in self.candidates:
            loss = "not scored"
            if c.scores:
                loss = ", ".join(
                    (f"{s.output} " if len(c.scores) > 1 else "") + f"loss {s.result.loss:.4g}"
                    for s in c.scores
                )
            size = f", {c.size_mb:.2f} MB" if c.size_mb is not None else ""
            verdict = "accepted" if c.accepted else "rejected: " + "; ".join(c.reasons)
            if c.comparison:
                verdict += f" ({c.comparison})"
            lines.append(f"  {c.name}: {loss}{size} — {verdict}")
        return "\n".join(lines)


class _Searcher:
    def __init__(
        self,
        source: Path,
        work_dir: Path,
        validation: SampleSet,
        calibration: SampleSet | None,
        settings: SearchSettings,
        progress: Progress,
    ) -> None:
        self.source = source
        self.work_dir = work_dir
        self.validation = validation
        self.calibration = calibration
        self.settings = settings
        self.progress = progress
        reference = self._open(source)
        self.names = reference.outputs
        self.reference_samples = reference.run_each(validation.feeds)
        self.reference: Outputs = by_output(self.names, self.reference_samples)
        refuse_non_finite_outputs(self.reference, validation.source)
        self.judges = plan_judges(
            parse_metric_spec(settings.metric),
            self.reference,
            validation.labels,
            max_loss=settings.max_loss,
            output_losses=settings.output_losses,
        )
        self.fp32_invariance: InvarianceResult | None = None
        self.allowed_deviation = settings.invariance_tolerance
        if settings.require_invariance:
            self.fp32_invariance = check_batch_invariance(
                reference.run_each,
                reference.run_batch,
                validation.feeds,
                batch_size=settings.invariance_batch_size,
                tolerance=settings.invariance_tolerance,
                alone=self.reference_samples,
            )
            # quantization is judged on what it adds to the FP32 model's own deviation (whose
            # rounding it moves a little: a quarter of it more is still FP32's doing)
            self.allowed_deviation += FP32_DEVIATION_ALLOWANCE * self.fp32_invariance.worst_relative

    def _open(self, path: Path) -> Session:
        return open_session(
            path, threads=self.settings.measure.threads, output=self.settings.output
        )

    def try_candidate(self, options: QuantizeOptions, index: int) -> CandidateResult:
        result = CandidateResult(options.describe(), options)
        path = self.work_dir / f"candidate-{index}.onnx"
        try:
            quantized = quantize_model(self.source, path, options, calibration=self.calibration)
            session = self._open(path)
        except OptimizeError as e:
            result.reasons.append(f"could not be built: {e}")
            self.progress.step(f"{result.name}: failed")
            return result
        if options.exclude_nodes:
            result.name = options.describe(float_nodes=len(quantized.float_nodes))
        result.path = path
        result.size_mb = model_size_mb(path)
        result.weights = weight_share(path)
        outputs = session.run_each(self.validation.feeds)
        result.scores = judge(
            self.judges,
            self.reference,
            by_output(self.names, outputs),
            self.validation.labels,
        )
        result.invariance = check_batch_invariance(
            session.run_each,
            session.run_batch,
            self.validation.feeds,
            batch_size=self.settings.invariance_batch_size,
            tolerance=self.settings.invariance_tolerance,
            alone=outputs,
        )
        s = self.settings
        result.reasons += [score.describe() for score in result.scores if not score.passed]
        if s.max_size_mb is not None and result.size_mb > s.max_size_mb:
            result.reasons.append(f"size {result.size_mb:.2f} MB > max {s.max_size_mb:g} MB")
        worst = result.invariance.worst_relative
        if s.require_invariance and not worst <= self.allowed_deviation:
            fp32 = self.fp32_invariance
            own = (
                f"; FP32 itself deviates by {fp32.worst_relative:.3g}, allowed "
                f"{FP32_DEVIATION_ALLOWANCE:g}x on top of {s.invariance_tolerance:g}"
                if fp32 is not None and not fp32.invariant
                else ""
            )
            result.reasons.append(
                f"not batch-invariant (worst deviation {worst:.3g} > "
                f"{self.allowed_deviation:.3g}{own})"
            )
        result.accepted = not result.reasons
        self.progress.step(f"{result.name}: worst loss/budget {result.pressure:.4g}")
        return result

    def exclusions(self, tried: list[CandidateResult]) -> list[CandidateResult]:
        """Retry the least lossy fixable candidate with its most sensitive nodes in float."""
        fixable = [
            c
            for c in tried
            if c.scores
            and math.isfinite(c.pressure)
            and not any(r.startswith(("size", "not batch", "could not")) for r in c.reasons)
        ]
        if not fixable:
            return []
        base = min(fixable, key=lambda c: c.pressure)
        assert base.path is not None
        changed = changed_nodes(self.source, base.path)
        simulated = [
            node.name
            for node in rank_sensitive_nodes(self.source, self.validation.feeds, base.options)
            if node.name in changed
        ]
        # quantized nodes whose error is not simulated (LSTM, Attention, ...) come last
        ranked = simulated + sorted(changed - set(simulated))
        # at least one node stays quantized, or the "INT8" candidate would be the FP32 model
        limit = min(self.settings.max_excluded, len(changed) - 1, len(ranked))
        results: list[CandidateResult] = []
        for k in [k for k in _EXCLUSION_COUNTS if k <= limit]:
            options = base.options.excluding(ranked[:k])
            result = self.try_candidate(options, len(tried) + len(results))
            results.append(result)
            if result.accepted:
                break
        return results

    def choose(self, accepted: list[CandidateResult]) -> tuple[CandidateResult, str]:
        """The accepted candidate to keep, and why (see :mod:`servinglib.optimize.compare`)."""
        feed = representative_feed(self.validation.feeds)
        sessions = {str(i): self._open(c.path) for i, c in enumerate(accepted) if c.path}
        stats = measure_latency(sessions, feed, self.settings.measure)
        for i, candidate in enumerate(accepted):
            candidate.latency = stats[str(i)]
        return pick_candidate(accepted)


def planned_steps(base_candidates: int, settings: SearchSettings) -> int:
    """Progress steps :func:`search_candidates` counts: candidates, possible retries, choice."""
    retries = len([k for k in _EXCLUSION_COUNTS if k <= settings.max_excluded])
    return base_candidates + retries + 1


def search_candidates(
    source: Path,
    work_dir: Path,
    validation: SampleSet,
    calibration: SampleSet | None,
    settings: SearchSettings,
    *,
    candidates: Sequence[QuantizeOptions] | None = None,
    progress: Progress | None = None,
) -> SearchResult:
    """Quantize ``source`` with each candidate and choose among the accepted ones.

    ``candidates`` defaults to :func:`auto_candidates`; pass one to check a fixed method
    against the same budgets. Files are written to ``work_dir``.
    """
    progress = progress or Progress(0, enabled=False)
    base = (
        list(candidates)
        if candidates is not None
        else auto_candidates(source, calibration is not None)
    )
    start = progress.done
    planned = planned_steps(len(base), settings)
    searcher = _Searcher(source, work_dir, validation, calibration, settings, progress)
    tried = [searcher.try_candidate(options, i) for i, options in enumerate(base)]
    if candidates is None and not any(c.accepted for c in tried):
        tried += searcher.exclusions(tried)
    accepted = [c for c in tried if c.accepted]
    chosen: CandidateResult | None = None
    reason = "no candidate fits"
    if len(accepted) > 1:
        chosen, reason = searcher.choose(accepted)
    elif accepted:
        chosen, reason = accepted[0], "the only accepted candidate"
    progress.advance_to(start + planned, "candidate chosen" if chosen else "no candidate fits")
    return SearchResult(
        tried,
        chosen,
        searcher.reference_samples,
        searcher.judges,
        reason,
        searcher.fp32_invariance,
        searcher.names,
    )
