"""ONNX Runtime sessions for measuring and evaluating: fixed threads, one output, batch helpers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.optimize._deps import require
from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.samples import Feed, stack_feeds
from servinglib.runtimes.onnx import choose_providers

__all__ = ["GRAPH_LEVELS", "Session", "open_session"]

GRAPH_LEVELS = ("disable", "basic", "extended", "all")


class Session:
    """One inference session and the output it is judged on."""

    def __init__(self, raw: Any, path: Path, output: str | None) -> None:
        self.raw = raw
        self.path = path
        names = [node.name for node in raw.get_outputs()]
        if output is not None and output not in names:
            raise OptimizeError(f"{path} has no output {output!r}; its outputs are {names}")
        self.output = output or names[0]

    def run(self, feed: Feed) -> np.ndarray:
        """The judged output for one feed (any batch size)."""
        result: np.ndarray = self.raw.run([self.output], feed)[0]
        return result

    def run_each(self, feeds: Sequence[Feed]) -> list[np.ndarray]:
        """One run per feed, as a lone request is served."""
        return [self.run(feed) for feed in feeds]

    def run_batch(self, feeds: Sequence[Feed]) -> list[np.ndarray]:
        """One run for all feeds (zero-padded to a common shape); one output row per feed."""
        stacked = self.run(stack_feeds(feeds))
        return [stacked[i : i + 1] for i in range(len(feeds))]


def open_session(
    path: Path,
    *,
    threads: int = 1,
    level: str = "all",
    output: str | None = None,
    providers: Sequence[str] | None = None,
) -> Session:
    """An ONNX Runtime session with ``threads`` intra-op threads and one inter-op thread.

    Raises:
        OptimizeError: ONNX Runtime is missing or cannot load ``path``.
    """
    ort = require("onnxruntime", "running an ONNX model")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = graph_level(ort, level)
    options.log_severity_level = 3
    chosen = choose_providers(ort.get_available_providers(), providers)
    try:
        raw = ort.InferenceSession(str(path), sess_options=options, providers=chosen)
    except Exception as e:
        raise OptimizeError(f"ONNX Runtime cannot load {path}: {e}") from e
    return Session(raw, path, output)


def graph_level(ort: Any, level: str) -> Any:
    """The ``GraphOptimizationLevel`` named ``level`` (disable, basic, extended, all)."""
    levels = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    if level not in levels:
        raise OptimizeError(f"graph optimization level {level!r} is not one of {list(levels)}")
    return levels[level]
