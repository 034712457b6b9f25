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

The package exports the entry points below; the steps' own details (metrics, sensitivity,
the search) stay in their modules (``servinglib.optimize.search`` ...). The core (model,
registry, batching, service, ...) and the serving layers never import this package, and it
imports none of them (an import-linter contract). Names are loaded on first use, so
``servinglib --help`` does not pay for numpy, onnx and the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servinglib.lifecycle.importing import LazyExports

if TYPE_CHECKING:
    from servinglib.optimize._settings import OptimizeSettings
    from servinglib.optimize.budgets import Budgets
    from servinglib.optimize.errors import ExportVerificationError, OptimizeError
    from servinglib.optimize.export import export_module, load_module
    from servinglib.optimize.graph import optimize_graph
    from servinglib.optimize.measure import MeasureSettings
    from servinglib.optimize.pipeline import OptimizeOutcome, optimize_model
    from servinglib.optimize.quantize import QuantizeOptions, quantize_model
    from servinglib.optimize.report import OptimizeReport

__all__ = [
    "Budgets",
    "ExportVerificationError",
    "MeasureSettings",
    "OptimizeError",
    "OptimizeOutcome",
    "OptimizeReport",
    "OptimizeSettings",
    "QuantizeOptions",
    "export_module",
    "load_module",
    "optimize_graph",
    "optimize_model",
    "quantize_model",
]

# name -> submodule that defines it (a test keeps this, __all__ and the imports above equal)
_EXPORTS = {
    "Budgets": "budgets",
    "ExportVerificationError": "errors",
    "MeasureSettings": "measure",
    "OptimizeError": "errors",
    "OptimizeOutcome": "pipeline",
    "OptimizeReport": "report",
    "OptimizeSettings": "_settings",
    "QuantizeOptions": "quantize",
    "export_module": "export",
    "load_module": "export",
    "optimize_graph": "graph",
    "optimize_model": "pipeline",
    "quantize_model": "quantize",
}


_lazy = LazyExports(
    "servinglib.optimize", {name: f"servinglib.optimize.{home}" for name, home in _EXPORTS.items()}
)
__getattr__, __dir__ = _lazy.getattr, _lazy.dir
