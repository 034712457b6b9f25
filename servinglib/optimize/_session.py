"""ONNX Runtime sessions for measuring and evaluating: fixed threads, one output, batch helpers."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from servinglib.errors import ModelLoadError
from servinglib.optimize._deps import require
from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.samples import Feed, stack_feeds
from servinglib.runtimes.onnx import GRAPH_LEVELS, choose_providers, session_options

__all__ = ["GRAPH_LEVELS", "Session", "first_line", "open_session"]


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


_PATH = re.compile(r"/[^\s'\"]+")
# mkdtemp names: servinglib-optimize-XXXXXXXX, or .model.onnx.XXXXXXXX staging directories
_TEMPORARY = re.compile(r"^(servinglib-[a-z-]+|\..+)[_a-z0-9]{8}$")


def _short(match: re.Match[str]) -> str:
    path = PurePosixPath(match.group(0))
    inside_tmp = str(path).startswith(tempfile.gettempdir().rstrip("/") + "/")
    if inside_tmp or any(_TEMPORARY.match(part) for part in path.parts[:-1]):
        return path.name
    return match.group(0)


def first_line(error: Exception) -> str:
    """The gist of an error: its first line, temporary paths cut to their file names."""
    text = str(error).strip()
    return _PATH.sub(_short, text.splitlines()[0]) if text else type(error).__name__
