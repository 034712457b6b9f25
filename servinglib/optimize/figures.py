"""The side-by-side figures of the report: FP32 and the chosen INT8 model, measured together.

Size (every file of the model), single-request latency, batched throughput, the metric and
batch invariance, each model in a session set up as ``runtime: onnx`` serves it.

Example::

    baseline, optimized = measure_models(source, (int8, value), samples, search, settings, bar)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from servinglib.optimize._files import model_size_mb
from servinglib.optimize._progress import Progress
from servinglib.optimize._session import open_session
from servinglib.optimize.invariance import check_batch_invariance
from servinglib.optimize.measure import measure_latency, measure_throughput
from servinglib.optimize.report import ModelFigures
from servinglib.optimize.samples import SampleSet, representative_feed, stack_feeds
from servinglib.optimize.search import SearchResult

if TYPE_CHECKING:
    from servinglib.optimize._settings import OptimizeSettings

__all__ = ["measure_models"]


def measure_models(
    source: Path,
    optimized: tuple[Path, float] | None,
    valid: SampleSet,
    search: SearchResult,
    settings: OptimizeSettings,
    progress: Progress,
    *,
    fp32_value: float,
) -> tuple[ModelFigures, ModelFigures | None]:
    """Latency, throughput and invariance of the FP32 and the INT8 model, side by side.

    ``optimized`` is the INT8 file and its deciding output's metric value; ``fp32_value`` the
    FP32 model's value of that metric.
    """
    measure = settings.measure
    reference = search.reference_outputs
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
        from_fp32 = max(
            (
                float(np.max(np.abs(a.astype(np.float64) - r.astype(np.float64))))
                for sample, ref in zip(alone, reference, strict=True)
                for a, r in zip(sample, ref, strict=True)
                if a.shape == r.shape and a.size
            ),
            default=0.0,
        )
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
            metric_value=fp32_value if name == "fp32" or optimized is None else optimized[1],
            invariance=invariance,
            max_abs_diff_fp32=from_fp32,
        )
    return figures["fp32"], figures.get("int8")
