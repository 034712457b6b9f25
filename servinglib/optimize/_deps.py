"""Lazy imports of the heavy libraries optimize needs, with an error that says what to install.

Nothing here runs at import time: ``servinglib optimize --help`` and the core never pay for
torch, onnx, onnxruntime or matplotlib.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from servinglib.optimize.errors import OptimizeError

__all__ = ["require"]

# module -> the pip requirement that provides it
_EXTRAS = {
    "onnx": "pip install 'servinglib[optimize]'",
    "onnxruntime": "pip install 'servinglib[optimize]'",
    "onnxruntime.quantization": "pip install 'servinglib[optimize]'",
    "matplotlib": "pip install 'servinglib[optimize]'",
    "tqdm": "pip install 'servinglib[optimize]'",
    "torch": "pip install torch==2.13.0 (the CPU build; or 'servinglib[torch]')",
}


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise :class:`OptimizeError` naming ``purpose`` and the install line.

    Example::

        ort = require("onnxruntime", "measuring latency")
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".", maxsplit=1)[0]
        hint = _EXTRAS.get(top, f"pip install {top}")
        raise OptimizeError(f"{purpose} needs {module!r}, which is not installed; {hint}") from e
