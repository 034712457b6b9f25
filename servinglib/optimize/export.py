"""PyTorch → ONNX: export with named inputs/outputs and dynamic axes, check, verify numerically.

The TorchScript-based exporter is used on purpose (``dynamo=False``): it needs no extra
package (``onnxscript``), it keeps the input and output names given, and it honours
``dynamic_axes`` for batch and sequence axes. Tracing records one path through the module,
so the graph is then *verified*: run by ONNX Runtime on the sample, on a batch one larger,
with each dynamic non-batch axis one shorter, and on float inputs of other signs and ranges
(negated, times 10, times 0.1, random of the sample's spread), every output compared with PyTorch on
the same inputs. A branch on a tensor's value (``if x.sum() > 0:``) is fixed at trace time;
the exporter warns about it (``TracerWarning``) and such a warning, raised from the user's
code, fails the export unless ``allow_trace_warnings``. TracerWarnings raised inside PyTorch
itself (``nn.LSTM``, ``nn.GRU``, ``nn.MultiheadAttention`` check their own shapes) say
nothing about the user's module: they are ignored and listed in the result. PyTorch's fused
inference fast paths (``nn.TransformerEncoder``'s nested tensors, the fused attention of
``nn.MultiheadAttention``) have no ONNX export; they are switched off during the export and
its verification. The file appears at ``path`` only once verified.

Example::

    result = export_module(
        module, {"input_ids": ids, "attention_mask": mask}, Path("model.onnx"),
        output_names=["sentence_embedding"],
        dynamic_axes={"input_ids": {1: "sequence"}, "attention_mask": {1: "sequence"}},
    )
    print(result.max_abs_error)
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.errors import ModelLoadError
from servinglib.lifecycle.importing import import_object
from servinglib.optimize._deps import require
from servinglib.optimize._files import StagedOutput
from servinglib.optimize._messages import first_line
from servinglib.optimize._torch_export import exportable_torch, trace_warnings
from servinglib.optimize.errors import ExportVerificationError, OptimizeError

__all__ = ["DEFAULT_OPSET", "ExportResult", "export_module", "load_module"]

DEFAULT_OPSET = 17
BATCH_AXIS = "batch"


@dataclass(frozen=True)
class ExportResult:
    """What was exported and how closely ONNX Runtime reproduces PyTorch."""

    path: Path
    opset: int
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    dynamic_axes: Mapping[str, Mapping[int, str]]
    max_abs_error: float
    checked_shapes: tuple[str, ...]
    trace_warnings: tuple[str, ...] = ()
    ignored_warnings: tuple[str, ...] = ()  # TracerWarnings raised inside PyTorch itself


def load_module(reference: str, *, weights: Path | None = None, root: Path | None = None) -> Any:
    """A ``torch.nn.Module`` in eval mode from a TorchScript file or ``module:factory``.

    ``reference`` is a TorchScript file (``model.pt``) or ``package.module:factory`` /
    ``path/file.py:factory``, where ``factory()`` returns the module (a class works).
    ``weights`` is an optional ``state_dict`` file, loaded with ``weights_only=True``.

    Raises:
        OptimizeError: the file, module, factory or weights cannot be loaded.
    """
    torch = require("torch", "exporting a PyTorch model")
    root = root or Path.cwd()
    candidate = root / reference
    if reference.endswith((".pt", ".pth", ".ts")) and ":" not in reference:
        try:
            module = torch.jit.load(str(candidate), map_location="cpu")
        except Exception as e:
            raise OptimizeError(f"cannot load TorchScript file {candidate}: {e}") from e
        return module.eval()
    module_ref, _, name = reference.partition(":")
    if module_ref.endswith(".py"):
        # A file names itself: import it from its own directory, wherever that is.
        file = Path(module_ref) if Path(module_ref).is_absolute() else root / module_ref
        root, reference = file.parent.resolve(), f"{file.name}:{name}"
    try:
        factory = import_object(reference, root)
    except ModelLoadError as e:
        raise OptimizeError(f"{e}; pass `module:factory` or a TorchScript file") from e
    if not callable(factory):
        raise OptimizeError(f"{reference!r} is not callable; name a class or a function")
    try:
        module = factory()
    except Exception as e:
        raise OptimizeError(
            f"factory {reference!r} raised {type(e).__name__}: {first_line(e)}; it must "
            "return the torch.nn.Module to export when called without arguments"
        ) from e
    if not isinstance(module, torch.nn.Module):
        raise OptimizeError(
            f"{reference!r} returned {type(module).__name__}, not a torch.nn.Module"
        )
    if weights is not None:
        try:
            state = torch.load(str(weights), map_location="cpu", weights_only=True)
            module.load_state_dict(state)
        except Exception as e:
            raise OptimizeError(f"cannot load weights {weights} into {reference!r}: {e}") from e
    return module.eval()


def export_module(
    module: Any,
    sample: Mapping[str, np.ndarray],
    path: Path,
    *,
    output_names: Sequence[str],
    dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
    opset: int = DEFAULT_OPSET,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    allow_trace_warnings: bool = False,
) -> ExportResult:
    """Export ``module`` called as ``module(*sample.values())`` to ``path`` and verify it.

    Axis 0 of every input and output is dynamic (``batch``); ``dynamic_axes`` adds more,
    e.g. ``{"input_ids": {1: "sequence"}}``.

    Raises:
        OptimizeError: the module fails on the sample or returns a dict or non-tensors, the
            export or ``onnx.checker`` fails, or the opset is below 17.
        ExportVerificationError: the exporter warned of a traced branch (unless allowed), or
            ONNX Runtime and PyTorch disagree beyond ``atol + rtol*|y|`` on any input.
    """
    torch = require("torch", "exporting a PyTorch model")
    onnx = require("onnx", "checking an exported model")
    if opset < DEFAULT_OPSET:
        raise OptimizeError(f"opset {opset} is too old; use {DEFAULT_OPSET} or newer")
    axes = _all_dynamic_axes(list(sample), list(output_names), dynamic_axes or {})
    module = module.eval()
    name = type(module).__name__
    _check_outputs(module, sample, list(output_names))
    args = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in sample.values())
    with StagedOutput(path) as staged, exportable_torch(torch):
        try:
            with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", torch.jit.TracerWarning)
                torch.onnx.export(
                    module,
                    args,
                    str(staged.path),
                    dynamo=False,
                    opset_version=opset,
                    input_names=list(sample),
                    output_names=list(output_names),
                    dynamic_axes=axes,
                    do_constant_folding=True,
                )
        except Exception as e:
            raise OptimizeError(
                f"torch.onnx.export of {name} failed: {type(e).__name__}: {first_line(e)}"
            ) from e
        traced, ignored = trace_warnings(torch, caught)
        if traced and not allow_trace_warnings:
            raise ExportVerificationError(
                f"exporting {name}: the trace fixed values that may differ on other inputs:\n"
                + "\n".join(f"  {w}" for w in traced)
                + "\nrewrite those lines with tensor operations (torch.where instead of an "
                "if on a tensor, no .item()/.numpy()/Python math on tensors), or pass "
                "--allow-trace-warnings if each one is constant by design"
            )
        try:
            onnx.checker.check_model(str(staged.path), full_check=True)
        except Exception as e:
            raise OptimizeError(f"onnx.checker rejects the export of {name}: {e}") from e
        worst, shapes = _verify(module, staged.path, sample, list(output_names), axes, atol, rtol)
        staged.commit()
    return ExportResult(
        path=path,
        opset=opset,
        input_names=tuple(sample),
        output_names=tuple(output_names),
        dynamic_axes={name: dict(a) for name, a in axes.items()},
        max_abs_error=worst,
        checked_shapes=tuple(shapes),
        trace_warnings=tuple(traced),
        ignored_warnings=tuple(ignored),
    )


def _check_outputs(module: Any, sample: Mapping[str, np.ndarray], output_names: list[str]) -> None:
    """Run the module once in PyTorch: a clear error for dicts, NumPy use or a wrong count."""
    torch = require("torch", "exporting a PyTorch model")
    name = type(module).__name__
    try:
        with torch.no_grad():
            result = module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in sample.values()))
    except Exception as e:
        raise OptimizeError(
            f"{name}.forward fails on the sample inputs {list(sample)}: "
            f"{type(e).__name__}: {first_line(e)}"
        ) from e
    if isinstance(result, Mapping):
        raise OptimizeError(
            f"{name}.forward returns a dict ({sorted(map(str, result))}); ONNX outputs are "
            "positional: return a tensor or a tuple of tensors in --output-names order"
        )
    items = [result] if isinstance(result, torch.Tensor) else list(result)
    wrong = [type(item).__name__ for item in items if not isinstance(item, torch.Tensor)]
    if wrong:
        raise OptimizeError(
            f"{name}.forward returns {wrong} besides tensors (NumPy or Python values cannot be "
            "exported); compute them with torch operations"
        )
    if len(items) != len(output_names):
        raise OptimizeError(
            f"{name}.forward returns {len(items)} output(s) but {len(output_names)} output "
            f"name(s) were given ({output_names}); name each output once"
        )


def _all_dynamic_axes(
    inputs: list[str], outputs: list[str], extra: Mapping[str, Mapping[int, str]]
) -> dict[str, dict[int, str]]:
    unknown = sorted(set(extra) - set(inputs) - set(outputs))
    if unknown:
        raise OptimizeError(
            f"dynamic axes name {unknown}, which are neither inputs {inputs} nor outputs {outputs}"
        )
    axes: dict[str, dict[int, str]] = {name: {0: BATCH_AXIS} for name in inputs + outputs}
    for name, more in extra.items():
        axes[name].update({int(axis): label for axis, label in more.items()})
    return axes


def _variants(
    sample: Mapping[str, np.ndarray], axes: Mapping[str, Mapping[int, str]]
) -> list[tuple[str, dict[str, np.ndarray]]]:
    """The sample, a batch one larger, each named non-batch axis one shorter, other values."""
    base = {name: np.asarray(a) for name, a in sample.items()}
    variants = [("sample", base)]
    variants.append(("batch+1", {n: np.concatenate([a, a[:1]], axis=0) for n, a in base.items()}))
    labels = sorted({label for name in base for ax, label in axes[name].items() if ax != 0})
    for label in labels:
        shorter = dict(base)
        for name, array in base.items():
            for axis, axis_label in axes[name].items():
                if axis_label == label and axis != 0 and array.shape[axis] > 1:
                    shorter[name] = np.take(array, range(array.shape[axis] - 1), axis=axis)
        variants.append((f"{label}-1", shorter))
    floats = [n for n, a in base.items() if np.issubdtype(a.dtype, np.floating)]
    if floats:
        rng = np.random.default_rng(0)

        def changed(transform: Any) -> dict[str, np.ndarray]:
            return {
                n: (transform(a).astype(a.dtype) if n in floats else a) for n, a in base.items()
            }

        variants += [
            ("negated", changed(lambda a: -a)),
            ("x10", changed(lambda a: a * 10)),
            ("x0.1", changed(lambda a: a * 0.1)),
            (
                "random",
                changed(lambda a: rng.normal(0.0, float(a.std()) or 1.0, a.shape)),
            ),
        ]
    return variants


def _verify(
    module: Any,
    path: Path,
    sample: Mapping[str, np.ndarray],
    output_names: list[str],
    axes: Mapping[str, Mapping[int, str]],
    atol: float,
    rtol: float,
) -> tuple[float, list[str]]:
    torch = require("torch", "verifying an export")
    ort = require("onnxruntime", "verifying an export")
    options = ort.SessionOptions()
    options.log_severity_level = 4  # a failing variant is reported below, once
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    # an input the traced graph does not use (e.g. a mask the module ignores) is dropped
    graph_inputs = {value.name for value in session.get_inputs()}
    shown = path.name
    worst = 0.0
    checked = []
    for label, feed in _variants(sample, axes):
        shapes = {n: list(a.shape) for n, a in feed.items()}
        try:
            with torch.no_grad():
                expected = module(
                    *(torch.from_numpy(np.ascontiguousarray(a)) for a in feed.values())
                )
        except Exception as e:
            raise ExportVerificationError(
                f"{shown}: PyTorch fails on the {label} input {shapes}: "
                f"{type(e).__name__}: {first_line(e)}; the exported dynamic axes promise "
                "such inputs work: drop the axis from --dynamic-axis or fix the module"
            ) from e
        expected_list = [expected] if isinstance(expected, torch.Tensor) else list(expected)
        try:
            actual = session.run(output_names, {n: a for n, a in feed.items() if n in graph_inputs})
        except Exception as e:
            raise ExportVerificationError(
                f"{shown}: ONNX Runtime cannot run the exported graph on the {label} input "
                f"{shapes}: {type(e).__name__}: {first_line(e)}; the trace fixed a shape or "
                "value that input changes (a Python int from .size() or .item(), a reshape "
                "to constant sizes): compute it with tensor operations, or export without "
                "that dynamic axis"
            ) from e
        for name, want, got in zip(output_names, expected_list, actual, strict=True):
            want_np = want.detach().numpy()
            if want_np.shape != got.shape:
                raise ExportVerificationError(
                    f"{shown}: output {name!r} has shape {list(got.shape)} in ONNX Runtime but "
                    f"{list(want_np.shape)} in PyTorch on the {label} input; check dynamic axes"
                )
            error = np.abs(got.astype(np.float64) - want_np.astype(np.float64))
            allowed = atol + rtol * np.abs(want_np.astype(np.float64))
            if error.size and np.any(error > allowed):
                raise ExportVerificationError(
                    f"{shown}: output {name!r} differs from PyTorch by up to {error.max():.3g} "
                    f"(> {atol} + {rtol}·|y|) on the {label} input "
                    f"{shapes}; the traced graph does "
                    "not generalise (data-dependent control flow?): rewrite that branch with "
                    "tensor operations, or export with a sample that takes the general path"
                )
            worst = max(worst, float(error.max()) if error.size else 0.0)
        checked.append(f"{label}: " + ", ".join(f"{n}{list(a.shape)}" for n, a in feed.items()))
    return worst, checked
