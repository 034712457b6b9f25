"""servinglib.optimize: PyTorch → ONNX → graph optimization → INT8, measured and reported.

Each step works alone; :func:`optimize_model` runs them together (``servinglib optimize
run``). torch, onnx, onnxruntime, matplotlib and tqdm are imported only when a step needs
them (``pip install 'servinglib[optimize]'``, plus torch for export)::

    from servinglib.optimize import OptimizeSettings, optimize_model

    outcome = optimize_model(
        Path("model.onnx"), Path("int8/model.onnx"), validation=Path("validation.npz"),
        settings=OptimizeSettings(metric="cosine", require_invariance=True),
    )
    print(outcome.report.chosen, outcome.passed)

The core (model, registry, batching, service, ...) never imports this package. Names are
loaded on first use, so ``servinglib --help`` does not pay for numpy, jsonschema and the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servinglib.optimize.accuracy import METRICS, MetricResult, evaluate
    from servinglib.optimize.budgets import (
        BudgetResult,
        Budgets,
        budgets_for_model,
        check_budgets,
        check_served_version,
    )
    from servinglib.optimize.errors import ExportVerificationError, OptimizeError
    from servinglib.optimize.export import ExportResult, export_module, load_module
    from servinglib.optimize.graph import GraphResult, optimize_graph
    from servinglib.optimize.invariance import (
        InvarianceResult,
        check_batch_invariance,
        check_model_batch_invariance,
    )
    from servinglib.optimize.measure import (
        CpuInfo,
        LatencyStats,
        MeasureSettings,
        ThroughputStats,
        cpu_info,
        measure_latency,
        measure_throughput,
        model_size_mb,
    )
    from servinglib.optimize.pipeline import OptimizeOutcome, OptimizeSettings, optimize_model
    from servinglib.optimize.quantize import QuantizeOptions, QuantizeResult, quantize_model
    from servinglib.optimize.report import REPORT_FIELDS, OptimizeReport, write_report
    from servinglib.optimize.samples import SampleSet, input_specs, load_samples
    from servinglib.optimize.search import SearchResult, SearchSettings, search_candidates
    from servinglib.optimize.sensitivity import NodeSensitivity, rank_sensitive_nodes

__all__ = [
    "METRICS",
    "REPORT_FIELDS",
    "BudgetResult",
    "Budgets",
    "CpuInfo",
    "ExportResult",
    "ExportVerificationError",
    "GraphResult",
    "InvarianceResult",
    "LatencyStats",
    "MeasureSettings",
    "MetricResult",
    "NodeSensitivity",
    "OptimizeError",
    "OptimizeOutcome",
    "OptimizeReport",
    "OptimizeSettings",
    "QuantizeOptions",
    "QuantizeResult",
    "SampleSet",
    "SearchResult",
    "SearchSettings",
    "ThroughputStats",
    "budgets_for_model",
    "check_batch_invariance",
    "check_budgets",
    "check_model_batch_invariance",
    "check_served_version",
    "cpu_info",
    "evaluate",
    "export_module",
    "input_specs",
    "load_module",
    "load_samples",
    "measure_latency",
    "measure_throughput",
    "model_size_mb",
    "optimize_graph",
    "optimize_model",
    "quantize_model",
    "rank_sensitive_nodes",
    "search_candidates",
    "write_report",
]

# name -> submodule that defines it
_EXPORTS = {
    "BudgetResult": "budgets",
    "Budgets": "budgets",
    "CpuInfo": "measure",
    "ExportResult": "export",
    "ExportVerificationError": "errors",
    "GraphResult": "graph",
    "InvarianceResult": "invariance",
    "LatencyStats": "measure",
    "METRICS": "accuracy",
    "MeasureSettings": "measure",
    "MetricResult": "accuracy",
    "NodeSensitivity": "sensitivity",
    "OptimizeError": "errors",
    "OptimizeOutcome": "pipeline",
    "OptimizeReport": "report",
    "OptimizeSettings": "pipeline",
    "QuantizeOptions": "quantize",
    "QuantizeResult": "quantize",
    "REPORT_FIELDS": "report",
    "SampleSet": "samples",
    "SearchResult": "search",
    "SearchSettings": "search",
    "ThroughputStats": "measure",
    "budgets_for_model": "budgets",
    "check_batch_invariance": "invariance",
    "check_budgets": "budgets",
    "check_model_batch_invariance": "invariance",
    "check_served_version": "budgets",
    "cpu_info": "measure",
    "evaluate": "accuracy",
    "export_module": "export",
    "input_specs": "samples",
    "load_module": "export",
    "load_samples": "samples",
    "measure_latency": "measure",
    "measure_throughput": "measure",
    "model_size_mb": "measure",
    "optimize_graph": "graph",
    "optimize_model": "pipeline",
    "quantize_model": "quantize",
    "rank_sensitive_nodes": "sensitivity",
    "search_candidates": "search",
    "write_report": "report",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'servinglib.optimize' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"servinglib.optimize.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
