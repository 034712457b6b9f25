"""ONNX model files on disk: every file a model is made of, and writing one without risk.

A model may keep its weights in external-data files next to the graph (``model.onnx`` +
``model.onnx.data``; ONNX requires it above 2 GB and exporters of large transformers use it
by default). Sizes count every such file, copies carry them, and a destination is written
through a staging directory next to it and renamed into place only when the run succeeded,
so a failed run never leaves a partial model at ``--out`` nor touches what was there.

Example::

    with StagedOutput(Path("int8/model.onnx"), source=Path("model.onnx")) as staged:
        copy_model(candidate, staged.path)
        staged.commit()
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from servinglib.optimize._deps import require
from servinglib.optimize._messages import first_line, without_temporary_paths
from servinglib.optimize.errors import OptimizeError

__all__ = [
    "StagedOutput",
    "copy_model",
    "external_data_files",
    "has_external_data",
    "model_size_mb",
    "refuse_overwriting_source",
    "save_with_external_data",
]

_EXTERNAL = 1  # onnx.TensorProto.EXTERNAL


def external_data_files(path: Path) -> list[Path]:
    """The external-data files the model at ``path`` refers to (none for a single file)."""
    onnx = require("onnx", "reading an ONNX model")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:
        shown = without_temporary_paths(str(path))
        raise OptimizeError(f"cannot read ONNX model {shown}: {first_line(e)}") from e
    locations: dict[str, None] = {}
    for tensor in _tensors(model.graph):
        if tensor.data_location == _EXTERNAL:
            entries = {entry.key: entry.value for entry in tensor.external_data}
            if "location" in entries:
                locations[entries["location"]] = None
    return [path.parent / location for location in locations]


def _tensors(graph: Any) -> list[Any]:
    found: list[Any] = list(getattr(graph, "initializer", []))
    for node in getattr(graph, "node", []):
        for attribute in node.attribute:
            if attribute.HasField("t"):
                found.append(attribute.t)
            found.extend(attribute.tensors)
            if attribute.HasField("g"):
                found.extend(_tensors(attribute.g))
            for sub in attribute.graphs:
                found.extend(_tensors(sub))
    return found


def has_external_data(path: Path) -> bool:
    """True when the model at ``path`` keeps tensors in other files."""
    return bool(external_data_files(path))


def model_size_mb(path: Path) -> float:
    """Size of a model in MB (10⁶ bytes): the graph file plus every external-data file."""
    total = path.stat().st_size
    for extra in external_data_files(path):
        if not extra.is_file():
            raise OptimizeError(
                f"{path.name} refers to external data {extra.name!r}, which is not next to it"
            )
        total += extra.stat().st_size
    return total / 1e6


def copy_model(source: Path, destination: Path) -> None:
    """Copy a model; external data is rewritten as one ``<destination name>.data`` file."""
    if not has_external_data(source):
        shutil.copyfile(source, destination)
        return
    onnx = require("onnx", "copying an ONNX model")
    save_with_external_data(onnx.load(str(source)), destination)


def save_with_external_data(model: Any, destination: Path) -> None:
    """Save ``model`` with its tensors in one ``<destination name>.data`` file next to it."""
    onnx = require("onnx", "saving an ONNX model")
    onnx.save(
        model,
        str(destination),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=destination.name + ".data",
        size_threshold=1024,
    )


def refuse_overwriting_source(source: Path, destination: Path, flag: str = "--out") -> None:
    """Raise when ``destination`` (or its data file) is ``source`` or one of its files."""
    if not destination.exists() and not destination.with_name(destination.name + ".data").exists():
        return
    own = {source.resolve()} | {p.resolve() for p in _safe_external(source)}
    if (
        destination.resolve() in own
        or destination.with_name(destination.name + ".data").resolve() in own
    ):
        raise OptimizeError(
            f"{flag} {destination} is the source model (or one of its files); writing there "
            "would destroy the original: choose another path, e.g. int8/model.onnx"
        )


def _safe_external(path: Path) -> list[Path]:
    try:
        return external_data_files(path) if path.is_file() else []
    except OptimizeError:
        return []


class StagedOutput:
    """A staging directory next to ``destination``; :meth:`commit` renames the files in place.

    Without a commit (an error, a failed run, a signal) the staging directory is removed,
    and so are the parent directories it had to create, and ``destination`` is left as it
    was. Committed files get the mode a new file gets (``0o666`` less the umask), data files
    included, whatever mode the writer gave them.
    """

    def __init__(self, destination: Path, *, source: Path | None = None) -> None:
        if source is not None:
            refuse_overwriting_source(source, destination)
        self.destination = destination
        self._dir: Path | None = None
        self._created: list[Path] = []
        self._committed = False

    def __enter__(self) -> StagedOutput:
        missing = []
        parent = self.destination.parent.absolute()
        while not parent.exists():
            missing.append(parent)
            parent = parent.parent
        self.destination.parent.mkdir(parents=True, exist_ok=True)
        self._created = missing  # deepest first
        self._dir = Path(
            tempfile.mkdtemp(prefix=f".{self.destination.name}.", dir=self.destination.parent)
        )
        return self

    @property
    def path(self) -> Path:
        """Where to write the model (same file name as the destination)."""
        if self._dir is None:
            raise OptimizeError("StagedOutput used outside its with-block")
        return self._dir / self.destination.name

    def commit(self) -> Path:
        """Move the staged model and its data files to the destination; returns it."""
        staged = self.path
        moved = set()
        mode = _new_file_mode()
        # data files first, so the graph never appears before the weights it refers to
        for extra in external_data_files(staged):
            os.chmod(extra, mode)
            os.replace(extra, self.destination.parent / extra.name)
            moved.add(extra.name)
        stale = self.destination.with_name(self.destination.name + ".data")
        if stale.name not in moved and stale.is_file():
            stale.unlink()
        os.chmod(staged, mode)
        os.replace(staged, self.destination)
        self._committed = True
        return self.destination

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        if not self._committed:
            for directory in self._created:
                try:
                    directory.rmdir()  # only while empty: never anything someone put there
                except OSError:
                    break


def _new_file_mode() -> int:
    """The mode ``open()`` gives a new file here: 0o666 less the process umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
