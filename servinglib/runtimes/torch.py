"""``runtime: torch``: serve a TorchScript ``model.pt`` or a ``torch.export`` ``model.pt2``.

torch is imported in ``load()``, in each worker after fork (torch is not fork-safe).
Inputs are passed positionally in the order of ``inputs:`` in servinglib.yaml (default
names ``input__0``, ``input__1``, ... as in Triton's PyTorch backend); outputs are named by
``outputs:`` (default ``output__0``, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from servinglib.errors import InvalidInputError, ModelLoadError
from servinglib.runtimes._base import TensorModel
from servinglib.runtimes._tensors import default_threads
from servinglib.wire.datatypes import numpy_dtype

__all__ = ["TorchModel"]


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise ModelLoadError(
            "runtime: torch needs PyTorch; install the CPU build with pip install torch==2.13.0"
        ) from e
    return torch


class TorchModel(TensorModel):
    """Serves a TorchScript or torch.export artifact under ``torch.inference_mode``."""

    platform = "pytorch_libtorch"

    def load(self, path: Path) -> None:
        """Load ``model.pt`` (TorchScript) or ``model.pt2`` (torch.export) from ``path``."""
        torch = _import_torch()
        self._torch = torch
        torch.set_num_threads(
            int(
                self.settings.runtime_options.get(
                    "intra_op_threads", default_threads(self.settings.workers)
                )
            )
        )
        scripted, exported = path / "model.pt", path / "model.pt2"
        try:
            if scripted.is_file():
                self.module = torch.jit.load(str(scripted), map_location="cpu").eval()
            elif exported.is_file():
                self.module = torch.export.load(str(exported)).module()
            else:
                raise ModelLoadError(
                    f"neither {scripted} nor {exported} exists; runtime: torch serves one of them"
                )
        except ModelLoadError:
            raise
        except Exception as e:
            raise ModelLoadError(f"torch cannot load the artifact in {path}: {e}") from e
        self._dtypes = {spec.name: numpy_dtype(spec.datatype) for spec in self.inputs} or {
            "input__0": np.dtype("float32")
        }
        self._output_names = [spec.name for spec in self.outputs]
        self._check_pad_inputs()
        self._take_masks()

    def _run(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = self._torch
        with torch.inference_mode():
            result = self.module(
                *(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays.values())
            )
        if isinstance(result, dict):
            return {str(k): v.numpy() for k, v in result.items()}
        tensors = list(result) if isinstance(result, tuple | list) else [result]
        names = self._output_names or [f"output__{i}" for i in range(len(tensors))]
        if len(names) != len(tensors):
            raise InvalidInputError(
                f"the module returned {len(tensors)} outputs; outputs: declares {len(names)}"
            )
        return {name: tensor.numpy() for name, tensor in zip(names, tensors, strict=True)}
