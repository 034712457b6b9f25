"""Judge every output: a metric and a loss budget per output, a candidate passes when all do.

A model returning ``(class_logits, amount)`` is judged on both: ``class_logits`` by top-1
agreement, ``amount`` by relative error (``--metric auto`` chooses per output, see
:mod:`servinglib.optimize.metric_choice`). ``--metric`` takes one metric for every output,
or ``name=metric`` pairs (``class_logits=top1,amount=relative-error``); a part without a
name is the default for the outputs not named. A user metric (``module:function``) given
without a name judges all outputs at once: it receives every output (see
:mod:`servinglib.optimize.accuracy`).

A metric the user names is checked against what the output holds before any candidate is
built, so it cannot be blind: ``accuracy``, ``top1`` and ``cosine`` on a one-value output
score every model the same (argmax of one value is always 0; the cosine of two single values
is 1 whenever their signs agree), and are refused with the metric that fits.

A loss that is not a finite number fails its output: NaN compares as within any budget.

Example::

    judges = plan_judges(parse_metric_spec("auto"), reference, labels, max_loss=0.01)
    scores = judge(judges, reference, candidate, labels)
    print(all(score.passed for score in scores))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from servinglib.optimize.accuracy import (
    METRICS,
    MetricResult,
    baseline,
    evaluate,
    evaluate_user,
    is_user_metric,
)
from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.metric_choice import choose_metric

__all__ = [
    "ALL_OUTPUTS",
    "MetricSpec",
    "OutputJudge",
    "OutputScore",
    "Outputs",
    "baselines",
    "by_output",
    "judge",
    "parse_metric_spec",
    "plan_judges",
    "refuse_non_finite_outputs",
]

ALL_OUTPUTS = "*"  # the output name of a user metric that judges every output at once
Outputs = dict[str, list[np.ndarray]]  # output name -> one array per sample
_BLIND_ON_ONE_VALUE = {
    "accuracy": "the argmax of one value is always 0, so every model scores the same",
    "top1": "the argmax of one value is always 0, so every model agrees with FP32",
    "cosine": "the cosine of two single values is 1 whenever their signs agree",
}


@dataclass(frozen=True)
class MetricSpec:
    """``--metric`` parsed: the default metric and the metrics named per output."""

    default: str = "auto"
    per_output: Mapping[str, str] = field(default_factory=dict)


def parse_metric_spec(text: str) -> MetricSpec:
    """``auto``, ``cosine``, ``module:function`` or ``a=top1,b=relative-error[,default]``.

    Raises:
        OptimizeError: an unknown metric, an empty name, or two defaults.
    """
    default: str | None = None
    per_output: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, metric = part.partition("=")
        if not sep:
            name, metric = "", part
        name, metric = name.strip(), metric.strip()
        if metric not in METRICS and not is_user_metric(metric):
            raise OptimizeError(
                f"--metric {text!r}: {metric!r} is not one of {', '.join(METRICS)} nor "
                "module:function"
            )
        if sep and not name:
            raise OptimizeError(f"--metric {text!r}: {part!r} names no output; write NAME=METRIC")
        if not sep:
            if default is not None:
                raise OptimizeError(
                    f"--metric {text!r} gives two default metrics ({default!r}, {metric!r}); "
                    "name the output of one: NAME=METRIC"
                )
            default = metric
        else:
            per_output[name] = metric
    return MetricSpec(default or "auto", per_output)


@dataclass(frozen=True)
class OutputJudge:
    """How one output is judged: its metric, why, and the largest loss allowed (None: any)."""

    output: str
    metric: str
    reason: str
    max_loss: float | None


@dataclass(frozen=True)
class OutputScore:
    """One output of one candidate: the metric's result against its budget."""

    output: str
    result: MetricResult
    max_loss: float | None

    @property
    def passed(self) -> bool:
        """Finite loss within the budget (a NaN or infinite loss never passes)."""
        loss = self.result.loss
        return math.isfinite(loss) and (self.max_loss is None or loss <= self.max_loss)

    @property
    def pressure(self) -> float:
        """Loss relative to its budget (the loss when unbudgeted); inf when not finite."""
        loss = self.result.loss
        if not math.isfinite(loss):
            return math.inf
        return loss / self.max_loss if self.max_loss else loss

    def describe(self) -> str:
        """Why it failed, e.g. ``output 'amount': relative-error loss 0.022 > max 0.01``."""
        where = "all outputs" if self.output == ALL_OUTPUTS else f"output {self.output!r}"
        loss = self.result.loss
        if not math.isfinite(loss):
            return f"{where}: {self.result.metric} loss is {loss} (non-finite INT8 outputs)"
        limit = f" > max {self.max_loss:g}" if self.max_loss is not None else ""
        return f"{where}: {self.result.metric} loss {loss:.4g}{limit}"


def by_output(names: Sequence[str], per_sample: Sequence[Sequence[np.ndarray]]) -> Outputs:
    """Per-sample tuples of outputs regrouped as one list of per-sample arrays per output."""
    return {name: [sample[i] for sample in per_sample] for i, name in enumerate(names)}


def refuse_non_finite_outputs(reference: Outputs, source: str) -> None:
    """Raise when an FP32 output holds NaN or infinity, naming the output, sample and column.

    Raises:
        OptimizeError: the first non-finite FP32 output value.
    """
    for name, arrays in reference.items():
        for row, array in enumerate(arrays):
            if array.dtype.kind not in "fc" or bool(np.isfinite(array).all()):
                continue
            flat = array.reshape(-1)
            column = int(np.flatnonzero(~np.isfinite(flat))[0])
            raise OptimizeError(
                f"the FP32 model's output {name!r} is {float(flat[column])} for validation sample "
                f"{row} (counting from 0), column {column}: no loss can be measured against "
                f"it; check that sample's inputs in {source} or the model"
            )


def _values_per_sample(arrays: Sequence[np.ndarray]) -> int:
    return max((int(a.size) for a in arrays), default=0)


def _check_fits(metric: str, output: str, arrays: Sequence[np.ndarray], flag: str) -> None:
    """Refuse a metric that cannot see errors on this output, naming the one that fits."""
    if is_user_metric(metric) or metric not in _BLIND_ON_ONE_VALUE:
        return
    if _values_per_sample(arrays) == 1:
        raise OptimizeError(
            f"{flag} {metric} cannot judge output {output!r}: it holds one value per sample "
            f"and {_BLIND_ON_ONE_VALUE[metric]}; use --metric {output}=relative-error (or "
            "max-abs-error), or --metric auto"
        )
    if metric in ("accuracy", "top1") and {int(a.shape[-1]) if a.ndim else 1 for a in arrays} == {
        1
    }:
        raise OptimizeError(
            f"{flag} {metric} cannot judge output {output!r}: its last axis has one value, "
            f"so {_BLIND_ON_ONE_VALUE[metric]}; use --metric {output}=relative-error or "
            "cosine"
        )


def plan_judges(
    spec: MetricSpec,
    reference: Outputs,
    labels: np.ndarray | None,
    *,
    max_loss: float | None,
    output_losses: Mapping[str, float] | None = None,
) -> list[OutputJudge]:
    """One judge per output (one for all outputs with an unnamed user metric).

    Raises:
        OptimizeError: a metric or budget names an unknown output, or a named metric is
            blind on its output.
    """
    output_losses = dict(output_losses or {})
    names = list(reference)
    for flag, named in (("--metric", spec.per_output), ("--max-accuracy-loss", output_losses)):
        unknown = sorted(set(named) - set(names))
        if unknown:
            raise OptimizeError(
                f"{flag} names outputs {unknown} the model lacks; its outputs are {names}"
            )
    if is_user_metric(spec.default) and not spec.per_output:
        return [
            OutputJudge(
                ALL_OUTPUTS,
                spec.default,
                f"the user metric named by --metric {spec.default}, given every output",
                max_loss,
            )
        ]
    judges = []
    for name in names:
        metric = spec.per_output.get(name, spec.default)
        arrays = reference[name]
        if metric != "auto":
            flag = f"--metric {name}=" if name in spec.per_output else "--metric"
            _check_fits(metric, name, arrays, flag.rstrip("="))
        chosen, reason = choose_metric(metric, arrays, labels=labels, output=name)
        judges.append(OutputJudge(name, chosen, reason, output_losses.get(name, max_loss)))
    return judges


def judge(
    judges: Sequence[OutputJudge],
    reference: Outputs,
    candidate: Outputs,
    labels: np.ndarray | None,
) -> list[OutputScore]:
    """Score every judged output of a candidate against FP32."""
    scores = []
    for j in judges:
        if j.output == ALL_OUTPUTS:
            if len(reference) == 1:
                only = next(iter(reference))
                result = evaluate_user(j.metric, reference[only], candidate[only], labels)
            else:
                result = evaluate_user(j.metric, reference, candidate, labels)
        else:
            result = evaluate(
                j.metric,
                reference=reference[j.output],
                candidate=candidate[j.output],
                labels=labels,
            )
        scores.append(OutputScore(j.output, result, j.max_loss))
    return scores


def baselines(
    judges: Sequence[OutputJudge], reference: Outputs, labels: np.ndarray | None
) -> dict[str, float]:
    """Each judged output's metric value for the FP32 model itself."""
    values = {}
    for j in judges:
        arrays = next(iter(reference.values())) if j.output == ALL_OUTPUTS else reference[j.output]
        values[j.output] = baseline(j.metric, arrays, labels)
    return values
