"""The runtimes a generated model can use, and the packages each one needs at serve time.

``python`` is a :class:`servinglib.Model` subclass in ``models/<model>/model.py``; ``onnx``
and ``torch`` serve a standard artifact (``model.onnx``, ``torch.export``'s ``model.pt2``) with no
Python of the team's own; so do ``sklearn`` (``model.skops``), ``xgboost`` (``model.json``) and
``lightgbm`` (``model.txt``).
"""

from __future__ import annotations

from typing import Literal

__all__ = ["RUNTIMES", "RUNTIME_REQUIREMENTS", "TORCH_REQUIREMENT", "Runtime"]

Runtime = Literal["python", "onnx", "torch", "sklearn", "xgboost", "lightgbm"]
RUNTIMES: tuple[Runtime, ...] = ("python", "onnx", "torch", "sklearn", "xgboost", "lightgbm")

# The CPU build, pinned exactly: a bare `torch` would pull a multi-GB CUDA build. CI and the
# Dockerfile of a generated repository with a torch model add PyTorch's CPU index so pip
# finds 2.13.0+cpu; the other repositories install from PyPI alone.
TORCH_REQUIREMENT = "torch==2.13.0"
TORCH_INDEX_URL = "https://download.pytorch.org/whl/cpu"

# Runtime -> (distribution name, requirements.txt line) it adds to a generated repository.
RUNTIME_REQUIREMENTS: dict[Runtime, tuple[tuple[str, str], ...]] = {
    "python": (),
    "onnx": (("onnxruntime", "onnxruntime>=1.17"),),
    "torch": (("torch", TORCH_REQUIREMENT),),
    "sklearn": (
        ("scikit-learn", "scikit-learn>=1.4"),
        ("skops", "skops>=0.10"),
        ("pandas", "pandas>=2.0"),
    ),
    "xgboost": (("xgboost", "xgboost>=2.0"),),
    "lightgbm": (("lightgbm", "lightgbm>=4.0"),),
}
