"""``runtime: onnx``: serve ``<version>/model.onnx`` with ONNX Runtime, no user code.

Sessions are created in ``load()``, which runs in each gunicorn worker after fork (ONNX
Runtime is not fork-safe). ``run`` releases the GIL, so gthread request threads overlap.
Intra-op threads default to cores ÷ workers so workers do not oversubscribe the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.errors import ModelLoadError
from servinglib.model import TensorSpec
from servinglib.runtimes._base import TensorModel
from servinglib.runtimes._tensors import default_threads, shared_dimensions
from servinglib.wire.datatypes import numpy_dtype

__all__ = ["GRAPH_LEVELS", "ONNX_DATATYPES", "OnnxModel", "choose_providers", "session_options"]

ARTIFACT = "model.onnx"

# ONNX tensor type -> Open Inference datatype (dtypes come from servinglib.wire.datatypes).
ONNX_DATATYPES: dict[str, str] = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}

GRAPH_LEVELS = ("disable", "basic", "extended", "all")

_PREFERRED_PROVIDERS = (
    "TensorrtExecutionProvider",
    "CUDAExecutionProvider",
    "CPUExecutionProvider",
)


def choose_providers(available: Sequence[str], requested: Sequence[str] | None = None) -> list[str]:
    """Execution providers to use: the requested ones, or TensorRT/CUDA when present, else CPU.

    Raises:
        ModelLoadError: a requested provider is not available in this onnxruntime build.
    """
    if requested:
        missing = [p for p in requested if p not in available]
        if missing:
            raise ModelLoadError(
                f"execution provider(s) {missing} are not available; this onnxruntime offers "
                f"{list(available)} (install onnxruntime-gpu for CUDA/TensorRT)"
            )
        return list(requested)
    return [p for p in _PREFERRED_PROVIDERS if p in available] or list(available)


def session_options(
    ort: Any,
    *,
    graph_level: str = "all",
    intra_op_threads: int = 1,
    inter_op_threads: int = 1,
    spin_wait: bool = False,
    optimized_model_path: Path | None = None,
) -> Any:
    """The ``onnxruntime.SessionOptions`` of a served session.

    ``runtime: onnx`` serves with these options and ``servinglib optimize`` measures with
    them, so the figures in an optimize report are those of the session the server runs.

    Raises:
        ModelLoadError: ``graph_level`` is not one of :data:`GRAPH_LEVELS`, or a thread count
            is below 1.
    """
    levels = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    if graph_level not in levels:
        raise ModelLoadError(
            f"graph_optimization_level {graph_level!r} is not one of {list(GRAPH_LEVELS)}"
        )
    if intra_op_threads < 1 or inter_op_threads < 1:
        raise ModelLoadError(
            f"thread counts must be at least 1 (intra_op_threads={intra_op_threads}, "
            f"inter_op_threads={inter_op_threads})"
        )
    options = ort.SessionOptions()
    options.graph_optimization_level = levels[graph_level]
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = inter_op_threads
    spin = "1" if spin_wait else "0"
    options.add_session_config_entry("session.intra_op.allow_spinning", spin)
    options.add_session_config_entry("session.inter_op.allow_spinning", spin)
    if optimized_model_path is not None:
        options.optimized_model_filepath = str(optimized_model_path)
    return options


def _import_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as e:
        raise ModelLoadError(
            "runtime: onnx needs ONNX Runtime; install it with pip install 'servinglib[onnx]'"
        ) from e
    return onnxruntime


def _spec(node: Any) -> TensorSpec:
    datatype = ONNX_DATATYPES.get(node.type, node.type)
    shape = tuple(d if isinstance(d, int) else -1 for d in node.shape)
    return TensorSpec(node.name, datatype, shape)


class OnnxModel(TensorModel):
    """Serves an ONNX graph; inputs and outputs come from the graph itself."""

    platform = "onnxruntime_onnx"

    def load(self, path: Path) -> None:
        """Create the inference session for ``path/model.onnx``."""
        ort = _import_onnxruntime()
        artifact = path / ARTIFACT
        if not artifact.is_file():
            raise ModelLoadError(f"{artifact} not found; runtime: onnx serves <version>/{ARTIFACT}")
        options_cfg = dict(self.settings.runtime_options)
        workers = self.settings.workers
        options = session_options(
            ort,
            graph_level=str(options_cfg.get("graph_optimization_level", "all")),
            intra_op_threads=int(options_cfg.get("intra_op_threads", default_threads(workers))),
            inter_op_threads=int(options_cfg.get("inter_op_threads", 1)),
            spin_wait=bool(options_cfg.get("spin_wait", False)),
            optimized_model_path=path / "model.optimized.onnx"
            if options_cfg.get("save_optimized_graph")
            else None,
        )
        providers = choose_providers(ort.get_available_providers(), options_cfg.get("providers"))
        try:
            self.session = ort.InferenceSession(
                str(artifact), sess_options=options, providers=providers
            )
        except Exception as e:
            raise ModelLoadError(f"ONNX Runtime cannot load {artifact}: {e}") from e
        self.inputs = tuple(_spec(node) for node in self.session.get_inputs())
        self._shared_dimensions = shared_dimensions(
            {node.name: node.shape for node in self.session.get_inputs()}
        )
        self.outputs = tuple(_spec(node) for node in self.session.get_outputs())
        self._dtypes = {
            node.name: numpy_dtype(ONNX_DATATYPES.get(node.type, "FP32"))
            for node in self.session.get_inputs()
        }
        self._output_names = [node.name for node in self.session.get_outputs()]
        self._check_pad_inputs()
        self._take_masks()

    def _run(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = self.session.run(self._output_names, arrays)
        return dict(zip(self._output_names, results, strict=True))
