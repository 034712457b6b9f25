"""Errors of ``servinglib optimize``, inside servinglib's one exception tree::

    ServinglibError
    └── OptimizeError               a step of optimize cannot go on (missing extra, bad input)
        ├── ExportVerificationError the ONNX graph disagrees with PyTorch on a sample input
        └── NoCandidateError        no quantized candidate holds the accuracy (or size) budget

Messages name the file or value, where it came from and the fix.
"""

from __future__ import annotations

from servinglib.errors import ServinglibError

__all__ = ["ExportVerificationError", "NoCandidateError", "OptimizeError"]


class OptimizeError(ServinglibError):
    """A step of ``servinglib optimize`` cannot go on."""


class ExportVerificationError(OptimizeError):
    """The exported ONNX graph does not reproduce the PyTorch module within tolerance."""


class NoCandidateError(OptimizeError):
    """Accuracy-aware search: no candidate stays within the allowed loss (and size budget)."""
