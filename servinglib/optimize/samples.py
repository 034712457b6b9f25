"""Sample inputs for calibration and validation: ``.npz``, ``.jsonl`` or a ``test_data.json``.

Every format becomes a :class:`SampleSet`: one feed per sample (``{input name: array}`` with a
leading batch dimension of 1) and, when the file has them, integer labels.

* ``.npz``: one array per graph input, samples along axis 0; an optional ``labels`` array.
* ``.jsonl``: one JSON object per line, ``{input name: nested list, "label": int?}``; a value
  without the batch axis gets one. Sequences may differ in length from line to line.
* ``test_data.json``: the inputs of a model version's self-test cases (no labels).

Example::

    specs = input_specs(Path("model.onnx"))
    validation = load_samples(Path("validation.npz"), specs)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.errors import SelfTestDataError
from servinglib.lifecycle.selftest import TEST_DATA_FILE, load_test_data
from servinglib.optimize._deps import require
from servinglib.optimize.errors import OptimizeError

__all__ = [
    "Feed",
    "InputSpec",
    "SampleSet",
    "input_specs",
    "load_labels",
    "load_samples",
    "refuse_non_finite",
    "representative_feed",
    "stack_feeds",
]

Feed = dict[str, np.ndarray]
LABEL_KEYS = ("labels", "label")


@dataclass(frozen=True)
class InputSpec:
    """One graph input: name, NumPy dtype, rank and shape (-1: any size; batch axis first)."""

    name: str
    dtype: np.dtype[Any]
    rank: int
    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class SampleSet:
    """Samples of one file: one feed per sample, and labels when the file has them."""

    feeds: tuple[Feed, ...]
    labels: np.ndarray | None
    source: str

    def __len__(self) -> int:
        return len(self.feeds)

    def head(self, count: int) -> SampleSet:
        """The first ``count`` samples."""
        labels = None if self.labels is None else self.labels[:count]
        return SampleSet(self.feeds[:count], labels, self.source)

    def every_other(self, start: int) -> SampleSet:
        """Samples ``start``, ``start + 2``, ... (two disjoint halves for start 0 and 1)."""
        labels = None if self.labels is None else self.labels[start::2]
        return SampleSet(self.feeds[start::2], labels, self.source)

    def with_labels(self, labels: np.ndarray) -> SampleSet:
        """The same samples with ``labels`` (one per sample) instead of the file's."""
        return SampleSet(self.feeds, labels, self.source)


def input_specs(model_path: Path) -> tuple[InputSpec, ...]:
    """The inputs of an ONNX graph (initializers excluded), read without loading weights."""
    onnx = require("onnx", "reading an ONNX model")
    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception as e:
        raise OptimizeError(f"cannot read ONNX model {model_path}: {e}") from e
    initializers = {init.name for init in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
        specs.append(InputSpec(value.name, dtype, len(shape), shape))
    return tuple(specs)


def load_samples(path: Path, specs: Sequence[InputSpec], limit: int | None = None) -> SampleSet:
    """Read samples for the graph inputs ``specs`` from ``path`` (.npz, .jsonl, test_data.json).

    Raises:
        OptimizeError: the file is missing, of an unknown kind, or does not fit the inputs.
    """
    if not path.is_file():
        raise OptimizeError(f"sample file {path} not found; pass an .npz, .jsonl or test_data.json")
    if path.suffix == ".npz":
        samples = _from_npz(path, specs)
    elif path.suffix == ".jsonl":
        samples = _from_jsonl(path, specs)
    elif path.name == TEST_DATA_FILE or path.suffix == ".json":
        samples = _from_test_data(path, specs)
    else:
        raise OptimizeError(
            f"{path}: unknown sample format {path.suffix!r}; use .npz (arrays named after the "
            f"inputs {[s.name for s in specs]}), .jsonl (one object per line) or test_data.json"
        )
    if not samples.feeds:
        raise OptimizeError(f"{path}: holds no samples; add at least one")
    samples = samples if limit is None else samples.head(limit)
    refuse_non_finite(samples.feeds, path)
    return samples


def refuse_non_finite(feeds: Sequence[Feed], path: Path) -> None:
    """Raise on the first NaN or infinity among float inputs, naming the sample and column.

    One NaN makes every loss NaN, and a NaN loss would compare as within any budget; an
    all-NaN calibration set breaks the quantizer's scales. Refused before anything runs.

    Raises:
        OptimizeError: sample (row), input, column and value of the first non-finite number.
    """
    for row, feed in enumerate(feeds):
        for name, array in feed.items():
            if array.dtype.kind not in "fc" or bool(np.isfinite(array).all()):
                continue
            flat = array.reshape(array.shape[0], -1)[0] if array.ndim else array.reshape(1)
            column = int(np.flatnonzero(~np.isfinite(flat))[0])
            index = np.unravel_index(column, array.shape[1:]) if array.ndim > 1 else ()
            where = f"column {column}" + (
                f" (index {list(map(int, index))})" if len(index) > 1 else ""
            )
            raise OptimizeError(
                f"{path}: sample {row} (counting from 0), input {name!r}, {where} is "
                f"{float(flat[column])}; remove or impute non-finite values (NaN, inf): they make "
                "every accuracy loss NaN and calibration scales meaningless"
            )


def load_labels(path: Path, count: int) -> np.ndarray:
    """Ground-truth labels for ``count`` validation samples from ``path``.

    ``.npy`` (one array), ``.npz`` (a ``labels`` array), or text (``.txt``/``.csv``: one label
    per line). Extra labels beyond ``count`` are dropped, as samples beyond ``--max-samples``.

    Raises:
        OptimizeError: the file is missing, unreadable, or has fewer labels than samples.
    """
    if not path.is_file():
        raise OptimizeError(f"--labels {path}: not found; pass .npy, .npz (labels) or .txt")
    try:
        if path.suffix == ".npy":
            labels = np.load(path, allow_pickle=False)
        elif path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                if "labels" not in archive.files:
                    raise OptimizeError(f"--labels {path}: has no 'labels' array")
                labels = archive["labels"]
        else:
            lines = path.read_text(encoding="utf-8").split()
            labels = np.array([int(float(line)) for line in lines])
    except (ValueError, OSError) as e:
        raise OptimizeError(f"--labels {path}: cannot read labels: {e}") from e
    labels = np.asarray(labels).reshape(-1)
    if len(labels) < count:
        raise OptimizeError(
            f"--labels {path}: {len(labels)} labels for {count} validation samples; give one each"
        )
    return labels[:count]


def _check_names(path: Path, names: Sequence[str], specs: Sequence[InputSpec], where: str) -> None:
    wanted = {s.name for s in specs}
    missing = sorted(wanted - set(names))
    unknown = sorted(set(names) - wanted - set(LABEL_KEYS))
    if missing or unknown:
        raise OptimizeError(
            f"{path}{where}: the model takes inputs {sorted(wanted)}; missing {missing}, "
            f"unknown {unknown} (labels go under {LABEL_KEYS[0]!r})"
        )


def _from_npz(path: Path, specs: Sequence[InputSpec]) -> SampleSet:
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    _check_names(path, list(arrays), specs, "")
    counts = {s.name: len(arrays[s.name]) for s in specs}
    if len(set(counts.values())) != 1:
        raise OptimizeError(f"{path}: inputs hold different sample counts {counts}; align them")
    count = next(iter(counts.values()))
    feeds = tuple(
        {s.name: _as_input(arrays[s.name][i : i + 1], s, path, f"[{i}]") for s in specs}
        for i in range(count)
    )
    labels = next((arrays[k] for k in LABEL_KEYS if k in arrays), None)
    if labels is not None and len(labels) != count:
        raise OptimizeError(f"{path}: {len(labels)} labels for {count} samples; give one each")
    return SampleSet(feeds, None if labels is None else np.asarray(labels), str(path))


def _from_jsonl(path: Path, specs: Sequence[InputSpec]) -> SampleSet:
    feeds: list[Feed] = []
    labels: list[int] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise OptimizeError(f"{path}:{number}: not valid JSON: {e}") from e
        if not isinstance(record, Mapping):
            raise OptimizeError(f"{path}:{number}: expected an object of input tensors")
        _check_names(path, list(record), specs, f":{number}")
        feeds.append(_feed(record, specs, path, f":{number}"))
        label = next((record[k] for k in LABEL_KEYS if k in record), None)
        if label is not None:
            labels.append(int(label))
    if labels and len(labels) != len(feeds):
        raise OptimizeError(f"{path}: some lines have a label and some do not; label every line")
    return SampleSet(tuple(feeds), np.asarray(labels) if labels else None, str(path))


def _from_test_data(path: Path, specs: Sequence[InputSpec]) -> SampleSet:
    if path.name != TEST_DATA_FILE:
        raise OptimizeError(f"{path}: a .json sample file must be a {TEST_DATA_FILE}")
    try:
        cases = load_test_data(path.parent)
    except SelfTestDataError as e:
        raise OptimizeError(str(e)) from e
    feeds = []
    for case in cases:
        where = f" case {case.name!r}"
        if not isinstance(case.input, Mapping):
            raise OptimizeError(f"{path}{where}: input must be an object of input tensors")
        _check_names(path, list(case.input), specs, where)
        feeds.append(_feed(case.input, specs, path, where))
    return SampleSet(tuple(feeds), None, str(path))


def _feed(record: Mapping[str, Any], specs: Sequence[InputSpec], path: Path, where: str) -> Feed:
    return {s.name: _as_input(record[s.name], s, path, where) for s in specs}


def _as_input(value: Any, spec: InputSpec, path: Path, where: str) -> np.ndarray:
    """``value`` as one sample of ``spec``: the graph's dtype, batch axis of size 1."""
    try:
        array = np.asarray(value, dtype=spec.dtype)
    except (TypeError, ValueError) as e:
        raise OptimizeError(
            f"{path}{where}: input {spec.name!r} cannot be converted to {spec.dtype}: {e}"
        ) from e
    if array.ndim == spec.rank - 1:
        array = array[np.newaxis]
    fits = all(
        want in (-1, got) for want, got in zip(spec.shape[1:], array.shape[1:], strict=False)
    )
    if array.ndim != spec.rank or array.shape[0] != 1 or not fits:
        expected = ["1", *("any" if d < 0 else str(d) for d in spec.shape[1:])]
        raise OptimizeError(
            f"{path}{where}: input {spec.name!r} has shape {list(array.shape)}; one sample has "
            f"shape [{', '.join(expected)}] (or the same without the batch axis)"
        )
    return array


def stack_feeds(feeds: Sequence[Feed]) -> Feed:
    """One batch from single-sample feeds; shorter axes are zero-padded at the end.

    Zero padding is what a served batch of sequences gets (token id 0, attention mask 0).
    """
    batch: Feed = {}
    for name in feeds[0]:
        parts = [feed[name] for feed in feeds]
        shape = np.max([p.shape for p in parts], axis=0)
        padded = []
        for part in parts:
            widths = [(0, 0)] + [
                (0, int(s - d)) for s, d in zip(shape[1:], part.shape[1:], strict=True)
            ]
            padded.append(np.pad(part, widths) if any(w[1] for w in widths) else part)
        batch[name] = np.concatenate(padded, axis=0)
    return batch


def representative_feed(feeds: Sequence[Feed]) -> Feed:
    """The sample of median size (e.g. median sequence length): single requests are timed on it."""
    sizes = [sum(a.size for a in feed.values()) for feed in feeds]
    return feeds[int(np.argsort(sizes, kind="stable")[len(sizes) // 2])]
