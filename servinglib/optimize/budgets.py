"""Budgets an optimized model must meet: size, median single-request latency, accuracy loss.

Budgets come from command-line flags (``--max-size-mb``, ``--max-latency-ms``,
``--max-accuracy-loss``) or from a model's ``optimize_budgets`` in servinglib.yaml; a flag
overrides the file. A budget not set is not checked. ``servinglib optimize`` exits non-zero
when one is exceeded, so CI can hold edge targets (e.g. < 5 MB, < 15 ms median)::

    models:
      - name: digits
        runtime: onnx
        optimize_budgets: {max_size_mb: 5, max_latency_ms: 15, max_accuracy_loss: 0.003}

``max_accuracy_loss`` bounds the loss of every judged output; a mapping sets it per output
(``max_accuracy_loss: {class_logits: 0.003, amount: 0.02}``; on the command line
``--max-accuracy-loss amount=0.02``, repeatable). An output not named keeps the plain
limit (or ``auto``'s 0.01).

Budgets belong to versions: ``servinglib selftest`` holds to them the versions listed under
``versions:`` or, without that key, every version but those whose ONNX model is FP32 (no
quantized operator), so a kept FP32 rollback version is not failed for ever by an INT8
size budget, and a version without an ONNX file is checked as before.

Example::

    results = check_budgets(Budgets(max_size_mb=5.0), size_mb=0.1, latency_ms=0.2, loss=0.0)
    assert all(r.passed for r in results)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.config.spec import ServiceConfig
from servinglib.errors import ConfigError
from servinglib.lifecycle.selftest import TEST_DATA_FILE
from servinglib.model import Model

__all__ = [
    "BUDGET_KEYS",
    "BudgetResult",
    "Budgets",
    "budgets_for_model",
    "check_budgets",
    "check_served_version",
    "model_batches",
]

BUDGET_KEYS = ("max_size_mb", "max_latency_ms", "max_accuracy_loss")
# operators only a quantized graph has (QDQ, dynamic and per-token INT8)
_QUANTIZED_OPS = frozenset(
    {
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "MatMulInteger",
        "ConvInteger",
        "QLinearMatMul",
        "QLinearConv",
        "DynamicQuantizeMatMul",
        "MatMulIntegerToFloat",
    }
)


@dataclass(frozen=True)
class Budgets:
    """Limits; None means not checked.

    Attributes:
        max_size_mb: largest model file, in MB (10⁶ bytes), external data included.
        max_latency_ms: largest median (p50) single-request latency, in milliseconds.
        max_accuracy_loss: largest loss of the chosen metric against FP32 (a fraction:
            0.003 is 0.3 accuracy points, 0.01 is a mean cosine of 0.99).
        versions: the versions held to these budgets (None: all but FP32 ONNX versions).
        output_losses: ``(output, limit)`` pairs overriding ``max_accuracy_loss`` per output.
    """

    max_size_mb: float | None = None
    max_latency_ms: float | None = None
    max_accuracy_loss: float | None = None
    versions: tuple[str, ...] | None = None
    output_losses: tuple[tuple[str, float], ...] = ()

    def override(self, other: Budgets) -> Budgets:
        """These budgets with every limit ``other`` sets taking precedence."""
        changes = {f.name: getattr(other, f.name) for f in fields(other)}
        changes["output_losses"] = tuple(
            {**dict(self.output_losses), **dict(other.output_losses)}.items()
        )
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def apply_to(self, version_dir: Path) -> bool:
        """True when the version at ``version_dir`` is held to these budgets."""
        if self.versions is not None:
            return version_dir.name in self.versions
        return not is_fp32_onnx_version(version_dir)

    @classmethod
    def from_mapping(
        cls, raw: Mapping[str, Any], *, source: str = "", key_path: str = ""
    ) -> Budgets:
        """Budgets from a mapping such as ``optimize_budgets`` in servinglib.yaml.

        Raises:
            ConfigError: an unknown key or a value that is not a non-negative number.
        """
        unknown = sorted(set(raw) - {*BUDGET_KEYS, "versions"})
        if unknown:
            raise ConfigError(
                f"unknown budget(s) {unknown}; allowed: {', '.join(BUDGET_KEYS)}, versions",
                source=source,
                key_path=key_path,
            )
        versions = raw.get("versions")
        if versions is not None and (
            not isinstance(versions, list | tuple)
            or not versions
            or not all(isinstance(v, str) and v for v in versions)
        ):
            raise ConfigError(
                f"{versions!r} is not a list of version names; write e.g. versions: ['2']",
                source=source,
                key_path=f"{key_path}.versions" if key_path else "versions",
            )
        values: dict[str, float] = {}
        per_output: dict[str, float] = {}
        for key, value in raw.items():
            if key == "versions":
                continue
            where = f"{key_path}.{key}" if key_path else key
            if key == "max_accuracy_loss" and isinstance(value, Mapping):
                for output, limit in value.items():
                    per_output[str(output)] = _limit(limit, source, f"{where}.{output}")
                continue
            values[key] = _limit(value, source, where)
        return cls(
            **values,
            versions=tuple(versions) if versions is not None else None,
            output_losses=tuple(per_output.items()),
        )


def _limit(value: Any, source: str, key_path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(
            f"{value!r} is not a non-negative number; set a limit such as 5",
            source=source,
            key_path=key_path,
        )
    return float(value)


@dataclass(frozen=True)
class BudgetResult:
    """One budget checked against the measured value."""

    budget: str
    limit: float
    actual: float
    passed: bool

    def describe(self) -> str:
        """``max_size_mb: 23.1 <= 25 (ok)`` or ``... > ... (EXCEEDED)``."""
        sign, verdict = ("<=", "ok") if self.passed else (">", "EXCEEDED")
        return f"{self.budget}: {self.actual:.4g} {sign} {self.limit:g} ({verdict})"


def check_budgets(
    budgets: Budgets,
    *,
    size_mb: float,
    latency_ms: float,
    loss: float | None,
    losses: Mapping[str, float] | None = None,
) -> list[BudgetResult]:
    """Check every budget that is set; a loss that could not be measured fails its budget.

    With ``losses`` (one per judged output), the accuracy budget is checked per output
    (``max_accuracy_loss[amount]``), each against its own limit; a NaN loss fails.
    """
    measured = {
        "max_size_mb": size_mb,
        "max_latency_ms": latency_ms,
        "max_accuracy_loss": math.inf if loss is None else loss,
    }
    results = []
    for key in BUDGET_KEYS:
        limit = getattr(budgets, key)
        if key == "max_accuracy_loss" and losses is not None:
            results += _output_losses(budgets, losses)
        elif limit is not None:
            actual = measured[key]
            results.append(BudgetResult(key, limit, actual, actual <= limit))
    return results


def _output_losses(budgets: Budgets, losses: Mapping[str, float]) -> list[BudgetResult]:
    limits = dict(budgets.output_losses)
    results = []
    for output, actual in losses.items():
        limit = limits.get(output, budgets.max_accuracy_loss)
        if limit is not None:
            name = "max_accuracy_loss" if len(losses) == 1 else f"max_accuracy_loss[{output}]"
            results.append(BudgetResult(name, limit, actual, actual <= limit))
    return results


def budgets_for_model(config: ServiceConfig, model: str) -> Budgets:
    """The ``optimize_budgets`` of ``model`` in a loaded servinglib.yaml (empty when unset).

    Raises:
        ConfigError: no model of that name, or invalid budgets.
    """
    for entry in config.models:
        if entry.name == model:
            raw = getattr(entry, "optimize_budgets", None) or {}
            return Budgets.from_mapping(
                raw, source=str(config.source), key_path=f"{entry.key_path}.optimize_budgets"
            )
    names = [entry.name for entry in config.models]
    raise ConfigError(f"no model {model!r}; models: {', '.join(names)}", source=str(config.source))


def model_batches(config: ServiceConfig, model: str) -> bool:
    """True when ``model`` in a loaded servinglib.yaml serves with dynamic batching."""
    return any(
        entry.name == model and getattr(entry, "batching", None) is not None
        for entry in config.models
    )


def is_fp32_onnx_version(version_dir: Path) -> bool:
    """True when ``version_dir`` holds ONNX models and none has a quantized operator."""
    try:
        import onnx
        from google.protobuf.message import DecodeError
    except ImportError:
        return False
    models = sorted(version_dir.glob("*.onnx"))
    for path in models:
        try:
            graph = onnx.load(str(path), load_external_data=False).graph
        except (OSError, DecodeError):
            # unreadable: not known to be FP32; loading the version reports the error
            return False
        if any(node.op_type in _QUANTIZED_OPS for node in graph.node):
            return False
    return bool(models)


def check_served_version(
    model: Model,
    version_dir: Path,
    inputs: Sequence[Any],
    budgets: Budgets,
    *,
    runs: int = 50,
    warmup: int = 5,
    clock: Callable[[], float] = time.perf_counter,
) -> list[BudgetResult]:
    """Size and latency budgets of a loaded model version (what ``servinglib selftest`` can see).

    Size is every file of ``version_dir`` but test_data.json; latency is the median of
    ``predict(prepare(x))`` over ``inputs`` (e.g. the self-test inputs), ``runs`` rounds
    after ``warmup``. The accuracy-loss budget needs the FP32 original and is not checked
    here: ``servinglib optimize run`` checks it. A version the budgets do not belong to
    (:meth:`Budgets.apply_to`) gets no results.
    """
    if not budgets.apply_to(version_dir) or budgets == Budgets(versions=budgets.versions):
        return []
    size_mb = (
        sum(
            path.stat().st_size
            for path in version_dir.rglob("*")
            if path.is_file() and path.name != TEST_DATA_FILE
        )
        / 1e6
    )
    prepared = [model.prepare(item) for item in inputs]
    for _ in range(warmup):
        for item in prepared:
            model.predict(item)
    times = []
    for _ in range(max(1, runs)):
        for item in prepared:
            start = clock()
            model.predict(item)
            times.append(clock() - start)
    latency_ms = float(np.median(times)) * 1e3 if times else 0.0
    return check_budgets(
        replace(budgets, max_accuracy_loss=None), size_mb=size_mb, latency_ms=latency_ms, loss=None
    )
