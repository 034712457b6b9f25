"""The settings of ``optimize_model`` and their validation (numbers in range, known levels)."""

from __future__ import annotations

from dataclasses import dataclass, field

from servinglib.optimize.budgets import Budgets
from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.invariance import DEFAULT_TOLERANCE
from servinglib.optimize.measure import MeasureSettings
from servinglib.optimize.quantize import QuantizeOptions

__all__ = ["RUN_GRAPH_LEVELS", "OptimizeSettings", "validate_settings"]

RUN_GRAPH_LEVELS = ("disable", "basic")


@dataclass(frozen=True)
class OptimizeSettings:
    """Everything ``optimize_model`` can be told.

    Attributes:
        method: ``auto`` (accuracy-aware search) or a fixed :class:`QuantizeOptions`.
        metric: ``auto`` (chosen per output, see
            :mod:`servinglib.optimize.metric_choice`), accuracy, top1, cosine,
            relative-error, max-abs-error, exact, a user function ``module:function``, or
            ``name=metric`` pairs per output (:mod:`servinglib.optimize.judging`).
        output: the graph outputs judged, a name, a comma list or a tuple (None: all).
        budgets: size, latency and accuracy-loss limits; ``max_accuracy_loss`` (and
            ``output_losses`` per output) also bound the search (``auto`` defaults the
            limit to 0.01).
        require_invariance: reject candidates that are not batch-invariant.
        graph_level: offline optimization before quantizing: ``basic`` or ``disable``.
        measure: how latency and throughput are measured.
        invariance_tolerance: relative deviation still called batch-invariant.
        invariance_batch_size: size of the mixed batches of the invariance check.
        max_samples: at most this many validation/calibration samples are used.
        progress: show a progress bar on stderr.
    """

    method: str | QuantizeOptions = "auto"
    metric: str = "auto"
    output: str | tuple[str, ...] | None = None
    budgets: Budgets = field(default_factory=Budgets)
    require_invariance: bool = False
    graph_level: str = "basic"
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    invariance_tolerance: float = DEFAULT_TOLERANCE
    invariance_batch_size: int = 8
    max_samples: int | None = 1000
    progress: bool = True


def _at_least(name: str, value: float | None, low: float) -> None:
    if value is not None and not value >= low:
        raise OptimizeError(f"{name} is {value!r}; it must be at least {low:g}")


def validate_settings(settings: OptimizeSettings) -> None:
    """Refuse settings no run can use, naming the option and the allowed range.

    ``extended`` (and ``all``) graph levels are refused before quantizing: they fuse
    operators into ``com.microsoft`` kernels (FusedMatMul, FusedConv, Gelu, LayerNorm
    variants) that the quantizer does not read, so most candidates would quantize nothing or
    fail. ONNX Runtime applies those fusions itself when the served session loads.

    Raises:
        OptimizeError: the first setting out of range.
    """
    if not isinstance(settings.method, QuantizeOptions) and settings.method != "auto":
        raise OptimizeError(f"method {settings.method!r} is neither 'auto' nor QuantizeOptions")
    if settings.graph_level not in RUN_GRAPH_LEVELS:
        raise OptimizeError(
            f"--graph-level {settings.graph_level!r} cannot precede quantization: it fuses "
            "operators into com.microsoft kernels the quantizer cannot read; use basic (the "
            "default) or disable; the served session applies the fusions when it loads"
        )
    measure = settings.measure
    _at_least("--threads", measure.threads, 1)
    _at_least("--warmup", measure.warmup, 0)
    _at_least("--iterations", measure.iterations, 1)
    _at_least("--repeats", measure.repeats, 1)
    _at_least("--batch-size", measure.batch_size, 1)
    _at_least("--invariance-batch-size", settings.invariance_batch_size, 2)
    _at_least("--invariance-tolerance", settings.invariance_tolerance, 0)
    _at_least("--max-samples", settings.max_samples, 1)
    budgets = settings.budgets
    _at_least("--max-size-mb", budgets.max_size_mb, 0)
    _at_least("--max-latency-ms", budgets.max_latency_ms, 0)
    _at_least("--max-accuracy-loss", budgets.max_accuracy_loss, 0)
