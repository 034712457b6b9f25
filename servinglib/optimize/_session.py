"""ONNX Runtime sessions for measuring and evaluating: fixed threads, judged outputs, batches."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.errors import ModelLoadError
from servinglib.optimize._deps import require
from servinglib.optimize._messages import first_line
from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.samples import Feed, stack_feeds
from servinglib.runtimes.onnx import GRAPH_LEVELS, choose_providers, session_options

__all__ = ["GRAPH_LEVELS", "Sample", "Session", "judged_outputs", "open_session"]


Sample = tuple[np.ndarray, ...]  # the judged outputs of one sample, in Session.outputs order


def judged_outputs(output: str | Sequence[str] | None) -> tuple[str, ...]:
    """``--output`` as names: None or empty means every output of the graph."""
    if output is None:
        return ()
    if isinstance(output, str):
        return tuple(part.strip() for part in output.split(",") if part.strip())
    return tuple(output)


class Session:
    """One inference session and the outputs it is judged on (all of them by default)."""

    def __init__(self, raw: Any, path: Path, output: str | Sequence[str] | None) -> None:
        self.raw = raw
        self.path = path
        names = [node.name for node in raw.get_outputs()]
        wanted = judged_outputs(output)
        unknown = [name for name in wanted if name not in names]
        if unknown:
            raise OptimizeError(
                f"{path.name} has no output {unknown[0]!r}; its outputs are {names}"
            )
        self.outputs: tuple[str, ...] = wanted or tuple(names)

    @property
    def output(self) -> str:
        """The first judged output."""
        return self.outputs[0]

    def run(self, feed: Feed) -> list[np.ndarray]:
        """The judged outputs for one feed (any batch size)."""
        result: list[np.ndarray] = self.raw.run(list(self.outputs), feed)
        return result

    def run_each(self, feeds: Sequence[Feed]) -> list[Sample]:
        """One run per feed, as a lone request is served."""
        return [tuple(self.run(feed)) for feed in feeds]

    def run_batch(self, feeds: Sequence[Feed]) -> list[Sample]:
        """One run for all feeds (zero-padded to a common shape); one output row per feed."""
        stacked = self.run(stack_feeds(feeds))
        return [tuple(o[i : i + 1] for o in stacked) for i in range(len(feeds))]


def open_session(
    path: Path,
    *,
    threads: int = 1,
    level: str = "all",
    output: str | Sequence[str] | None = None,
    providers: Sequence[str] | None = None,
) -> Session:
    """An ONNX Runtime session set up as ``runtime: onnx`` serves (one inter-op thread).

    The options come from :func:`servinglib.runtimes.onnx.session_options`, the function the
    server uses, so what is measured here is the session that serves.

    Raises:
        OptimizeError: ONNX Runtime is missing or cannot load ``path``.
    """
    ort = require("onnxruntime", "running an ONNX model")
    try:
        options = session_options(ort, graph_level=level, intra_op_threads=threads)
        chosen = choose_providers(ort.get_available_providers(), providers)
    except ModelLoadError as e:
        raise OptimizeError(str(e)) from e
    options.log_severity_level = 3
    try:
        raw = ort.InferenceSession(str(path), sess_options=options, providers=chosen)
    except Exception as e:
        raise OptimizeError(f"ONNX Runtime cannot load {path.name}: {first_line(e)}") from e
    return Session(raw, path, output)
