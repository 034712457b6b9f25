"""INT8 quantization of an ONNX graph: dynamic, dynamic per token, or static with calibration.

* ``dynamic``: weights int8 ahead of time; activation scales computed at run time, one per
  tensor (ONNX Runtime's ``quantize_dynamic``). No data needed. Results of a request depend
  on the batch it runs in.
* ``dynamic-per-token``: like ``dynamic`` but one activation scale per row, so results do not
  depend on the batch (see :mod:`servinglib.optimize._per_token`); MatMul/Gemm only.
* ``static``: weights and activations int8 with scales fixed by calibration on sample
  inputs (QDQ format, ``quantize_static``). Batch-invariant; needs representative data.

``per_channel`` gives each output channel of a weight its own scale; ``reduce_range`` uses
7-bit weights, for CPUs without VNNI whose u8xs8 instructions can saturate.

Excluded node names are those of the source graph. ONNX Runtime's dynamic quantizer first
rewrites every ``Gemm`` into ``MatMul`` (+ ``Add``) named ``<name>_MatMul``: an excluded
``Gemm`` is passed on under that name too, or it would be quantized all the same. A name
the graph does not have is refused; the result lists the excluded nodes that kept float
weights, which is what a label such as ``2 node(s) excluded`` counts.

Example::

    options = QuantizeOptions(method="static", per_channel=True)
    quantize_model(Path("model.onnx"), Path("model.int8.onnx"), options, calibration=samples)
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from servinglib.optimize._deps import require
from servinglib.optimize._files import StagedOutput, has_external_data, save_with_external_data
from servinglib.optimize._messages import first_line
from servinglib.optimize._per_token import rewrite_per_token
from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.samples import Feed, SampleSet

__all__ = [
    "CALIBRATION_METHODS",
    "METHODS",
    "QuantizeOptions",
    "QuantizeResult",
    "quantize_model",
    "sample_reader",
]

METHODS = ("dynamic", "dynamic-per-token", "static")
CALIBRATION_METHODS = ("minmax", "entropy", "percentile")


@dataclass(frozen=True)
class QuantizeOptions:
    """How to quantize.

    Attributes:
        method: ``dynamic``, ``dynamic-per-token`` or ``static``.
        per_channel: one weight scale per output channel instead of one per tensor.
        reduce_range: 7-bit weights (CPUs without VNNI).
        exclude_op_types: operator types left in float, e.g. ``("Gemm",)``.
        exclude_nodes: node names left in float (sensitive nodes).
        calibration_method: ``minmax``, ``entropy`` or ``percentile`` (static only).
    """

    method: str = "dynamic"
    per_channel: bool = False
    reduce_range: bool = False
    exclude_op_types: tuple[str, ...] = ()
    exclude_nodes: tuple[str, ...] = ()
    calibration_method: str = "minmax"

    def describe(self, *, float_nodes: int | None = None) -> str:
        """A short human label, e.g. ``static per-channel, 2 node(s) excluded``.

        ``float_nodes``: how many excluded nodes did stay float, once known.
        """
        parts = [self.method]
        if self.per_channel:
            parts.append("per-channel")
        if self.reduce_range:
            parts.append("reduce-range")
        label = " ".join(parts)
        if self.exclude_op_types:
            label += f", {'/'.join(self.exclude_op_types)} excluded"
        if self.exclude_nodes:
            count = len(self.exclude_nodes) if float_nodes is None else float_nodes
            label += f", {count} node(s) excluded"
        return label

    def excluding(self, nodes: Sequence[str]) -> QuantizeOptions:
        """The same options with ``nodes`` also left in float."""
        return replace(self, exclude_nodes=tuple(dict.fromkeys((*self.exclude_nodes, *nodes))))


@dataclass(frozen=True)
class QuantizeResult:
    """The quantized file and what was done."""

    path: Path
    options: QuantizeOptions
    calibration_samples: int
    float_nodes: tuple[str, ...] = ()  # excluded nodes that kept float weights


def sample_reader(feeds: Sequence[Feed]) -> Any:
    """An ONNX Runtime ``CalibrationDataReader`` over ``feeds`` (one sample each)."""
    quantization = require("onnxruntime.quantization", "static quantization")

    class SampleReader(quantization.CalibrationDataReader):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            self._feeds: Iterator[Feed] = iter(feeds)

        def get_next(self) -> Feed | None:
            return next(self._feeds, None)

    return SampleReader()


class _QuietAdvisories(logging.Filter):
    """Drops the quantizer's advisories that do not apply here (it logs them on the root logger).

    * "Please consider (to run) pre-processing": the graph step of ``optimize run`` does the
      optimization part; symbolic shape inference fails on many exported transformers.
    * "Axis 1 is out-of-range for weight ... with rank 1": per-channel quantization of a
      1-D weight (LayerNorm) falls back to one scale, which is right for it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            message.startswith("Please consider")
            or (message.startswith("Axis ") and "with rank 1" in message)
        )


@contextmanager
def _quiet_advisories() -> Iterator[None]:
    root = logging.getLogger()
    quiet = _QuietAdvisories()
    root.addFilter(quiet)
    try:
        yield
    finally:
        root.removeFilter(quiet)


def quantize_model(
    source: Path,
    destination: Path,
    options: QuantizeOptions,
    *,
    calibration: SampleSet | None = None,
) -> QuantizeResult:
    """Quantize the graph at ``source`` to INT8 and save it to ``destination``.

    Raises:
        OptimizeError: unknown method, static without calibration samples, or a failure of
            the quantizer (named with the model and options).
    """
    if options.method not in METHODS:
        raise OptimizeError(f"quantization method {options.method!r} is not one of {METHODS}")
    if options.calibration_method not in CALIBRATION_METHODS:
        raise OptimizeError(
            f"calibration method {options.calibration_method!r} is not one of {CALIBRATION_METHODS}"
        )
    if options.method == "static" and (calibration is None or not len(calibration)):
        raise OptimizeError(
            "static quantization needs calibration samples; pass --calibration FILE "
            "(.npz, .jsonl or test_data.json) with representative inputs"
        )
    quantization = require("onnxruntime.quantization", "quantization")
    onnx = require("onnx", "quantization")
    external = has_external_data(source)
    graph = onnx.load(str(source), load_external_data=False).graph
    requested = list(options.exclude_nodes)
    options = replace(options, exclude_nodes=_mapped_exclusions(graph, requested))
    with StagedOutput(destination, source=source) as staged:
        try:
            with _quiet_advisories():
                if options.method == "dynamic":
                    _dynamic(quantization, source, staged.path, options, external)
                elif options.method == "dynamic-per-token":
                    _per_token(quantization, source, staged.path, options, external)
                else:
                    assert calibration is not None
                    _static(quantization, source, staged.path, options, calibration, external)
        except OptimizeError:
            raise
        except Exception as e:
            raise OptimizeError(
                f"quantizing {source.name} ({options.describe()}) failed: "
                f"{type(e).__name__}: {first_line(e)}"
            ) from e
        float_nodes = _kept_float(onnx, staged.path, requested)
        staged.commit()
    samples = len(calibration) if options.method == "static" and calibration is not None else 0
    shown = replace(options, exclude_nodes=tuple(requested))
    return QuantizeResult(destination, shown, samples, float_nodes)


_RENAMED = "_MatMul"  # ONNX Runtime's dynamic quantizer: Gemm `n` -> MatMul `n_MatMul` (+ Add)


def _mapped_exclusions(graph: Any, names: Sequence[str]) -> tuple[str, ...]:
    """``names`` checked against the graph, each ``Gemm`` also under its rewritten name.

    Raises:
        OptimizeError: a name no node of the graph has.
    """
    op_types = {node.name: node.op_type for node in graph.node if node.name}
    unknown = [name for name in names if name not in op_types]
    if unknown:
        weighted = sorted(
            node.name
            for node in graph.node
            if node.name and node.op_type in ("MatMul", "Gemm", "Conv", "Gather", "LSTM", "GRU")
        )
        shown = ", ".join(weighted[:20]) + (" ..." if len(weighted) > 20 else "")
        raise OptimizeError(
            f"--exclude-nodes names {unknown}, which no node of the graph has; excludable "
            f"nodes (with weights): {shown or 'none'} (names after graph optimization: "
            "check them with `servinglib optimize graph` or Netron)"
        )
    mapped: list[str] = []
    for name in names:
        mapped.append(name)
        if op_types[name] == "Gemm":
            mapped.append(name + _RENAMED)
    return tuple(dict.fromkeys(mapped))


def _kept_float(onnx: Any, path: Path, names: Sequence[str]) -> tuple[str, ...]:
    """The excluded ``names`` whose node in the quantized graph still reads a float weight."""
    graph = onnx.load(str(path), load_external_data=False).graph
    float_weights = {
        init.name
        for init in graph.initializer
        if init.data_type == onnx.TensorProto.FLOAT and len(init.dims) >= 2
    }
    by_name = {node.name: node for node in graph.node if node.name}
    kept = []
    for name in names:
        node = by_name.get(name) or by_name.get(name + _RENAMED)
        if node is not None and any(i in float_weights for i in node.input):
            kept.append(name)
    return tuple(kept)


def _op_types(registry: Any, options: QuantizeOptions) -> list[str]:
    return sorted(set(registry) - set(options.exclude_op_types))


def _dynamic(
    quantization: Any, source: Path, destination: Path, options: QuantizeOptions, external: bool
) -> None:
    registry = require("onnxruntime.quantization.registry", "dynamic quantization")
    quantization.quantize_dynamic(
        str(source),
        str(destination),
        op_types_to_quantize=_op_types(registry.IntegerOpsRegistry, options),
        per_channel=options.per_channel,
        reduce_range=options.reduce_range,
        weight_type=quantization.QuantType.QInt8,
        nodes_to_exclude=list(options.exclude_nodes),
        use_external_data_format=external,
    )


def _per_token(
    quantization: Any, source: Path, destination: Path, options: QuantizeOptions, external: bool
) -> None:
    onnx = require("onnx", "per-token quantization")
    with tempfile.TemporaryDirectory(prefix="servinglib-per-token-") as tmp:
        start = source
        if "Gather" not in options.exclude_op_types:
            # Embedding tables (Gather of a constant) are weight-only: quantize them the usual
            # way; nothing about them depends on the batch.
            start = Path(tmp) / "gather.onnx"
            quantization.quantize_dynamic(
                str(source),
                str(start),
                op_types_to_quantize=["Gather"],
                per_channel=False,
                weight_type=quantization.QuantType.QInt8,
                nodes_to_exclude=list(options.exclude_nodes),
                use_external_data_format=external,
            )
        model = onnx.load(str(start))
    model, rewritten = rewrite_per_token(
        model,
        per_channel=options.per_channel,
        reduce_range=options.reduce_range,
        exclude_nodes=options.exclude_nodes,
        exclude_op_types=options.exclude_op_types,
    )
    if not rewritten:
        raise OptimizeError(
            f"{source} has no MatMul/Gemm with a constant float weight left to quantize per "
            "token; use --method dynamic or static"
        )
    if external:
        save_with_external_data(model, destination)
        onnx.checker.check_model(str(destination))
    else:
        onnx.checker.check_model(model)
        onnx.save(model, str(destination))


def _static(
    quantization: Any,
    source: Path,
    destination: Path,
    options: QuantizeOptions,
    calibration: SampleSet,
    external: bool,
) -> None:
    registry = require("onnxruntime.quantization.registry", "static quantization")
    methods = {
        "minmax": quantization.CalibrationMethod.MinMax,
        "entropy": quantization.CalibrationMethod.Entropy,
        "percentile": quantization.CalibrationMethod.Percentile,
    }
    quantization.quantize_static(
        str(source),
        str(destination),
        sample_reader(calibration.feeds),
        quant_format=quantization.QuantFormat.QDQ,
        op_types_to_quantize=_op_types(registry.QDQRegistry, options),
        per_channel=options.per_channel,
        reduce_range=options.reduce_range,
        activation_type=quantization.QuantType.QUInt8,
        weight_type=quantization.QuantType.QInt8,
        nodes_to_exclude=list(options.exclude_nodes),
        calibrate_method=methods[options.calibration_method],
        use_external_data_format=external,
    )
