"""Errors of ``servinglib optimize``, inside servinglib's one exception tree::

    ServinglibError
    └── OptimizeError               a step of optimize cannot go on (missing extra, bad input)
        └── ExportVerificationError the ONNX graph disagrees with PyTorch on a sample input

A search that finds no candidate within the budgets is not an error: its report says why
for each candidate, and ``servinglib optimize run`` exits 1.

Messages name the file or value, where it came from and the fix.
"""

from __future__ import annotations

from servinglib.errors import ServinglibError

__all__ = ["ExportVerificationError", "OptimizeError"]


class OptimizeError(ServinglibError):
    """A step of ``servinglib optimize`` cannot go on."""


class ExportVerificationError(OptimizeError):
    """The exported ONNX graph does not reproduce the PyTorch module within tolerance."""
