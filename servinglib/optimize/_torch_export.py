"""PyTorch set up for a trace that exports, and the trace's warnings sorted by whose they are.

Stock modules do not export as they come: the fused inference fast paths have no ONNX
export, and attention's packed Q/K/V projection traces with a fixed sequence length.
TracerWarnings raised inside PyTorch itself (its RNN and attention shape checks) say nothing
about the user's module; those raised from the user's code do.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["exportable_torch", "trace_warnings"]


@contextmanager
def exportable_torch(torch: Any) -> Iterator[None]:
    """PyTorch set up so stock modules export with dynamic axes; restored afterwards.

    * the fused inference fast paths (``aten::_transformer_encoder_layer_fwd``, nested
      tensors) are switched off: they have no ONNX export;
    * attention's packed in-projection splits Q/K/V with ``unflatten(-1, (3, E))``, which
      the tracer records with the sample's sequence length as a constant (the graph then
      fails on any other length); while exporting, the same projection is split with
      ``chunk``, which traces with dynamic shapes and gives the same numbers.
    """
    functional = torch.nn.functional
    packed = getattr(functional, "_in_projection_packed", None)
    mha: Any = getattr(torch.backends, "mha", None)
    fast = mha is not None and hasattr(mha, "set_fastpath_enabled")
    before = mha.get_fastpath_enabled() if fast else None

    def traceable(q: Any, k: Any, v: Any, w: Any, b: Any = None) -> Any:
        if k is v and q is k:
            projected = functional.linear(q, w, b)
            return tuple(part.contiguous() for part in projected.chunk(3, dim=-1))
        if k is v:
            size = q.size(-1)
            w_q, w_kv = w[:size], w[size:]
            b_q, b_kv = (None, None) if b is None else (b[:size], b[size:])
            key, value = functional.linear(k, w_kv, b_kv).chunk(2, dim=-1)
            return functional.linear(q, w_q, b_q), key.contiguous(), value.contiguous()
        return packed(q, k, v, w, b)  # type: ignore[misc]

    if fast:
        mha.set_fastpath_enabled(False)
    if packed is not None:
        functional._in_projection_packed = traceable
    try:
        yield
    finally:
        if packed is not None:
            functional._in_projection_packed = packed
        if fast:
            mha.set_fastpath_enabled(before)


def _inside(package: Any, filename: str) -> bool:
    """True when ``filename`` is a file of the installed ``package`` (e.g. torch)."""
    root = Path(package.__file__).resolve().parent
    try:
        return Path(filename).resolve().is_relative_to(root)
    except OSError:
        return False


def trace_warnings(
    torch: Any, caught: Sequence[warnings.WarningMessage]
) -> tuple[list[str], list[str]]:
    """The TracerWarnings of the user's code, and those PyTorch raised in its own files."""
    found: list[str] = []
    ignored: list[str] = []
    for item in caught:
        if issubclass(item.category, torch.jit.TracerWarning):
            text = str(item.message).strip().splitlines()[0]
            line = f"{Path(item.filename).name}:{item.lineno}: {text}"
            (ignored if _inside(torch, item.filename) else found).append(line)
        else:  # not ours to judge: pass it on as it came
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)
    return list(dict.fromkeys(found)), list(dict.fromkeys(ignored))
