"""``runtime: precomputed``: answer from a batch output, keyed by one feature.

A version directory holds the output of ``servinglib batch-predict`` (``runtime_options.file``,
default ``predictions``: a directory of parts, one ``.parquet`` file, or a ``.sqlite`` / ``.db``
file with a ``predictions`` table). A request's ``features[key]`` picks its row; the output
columns of that row are the answer. A miss (no row, or a row whose ``error`` is set) goes to
``fallback_version``, a version computed live, when configured::

    - name: cancer-scores
      runtime: precomputed
      repository: models/breast_cancer
      versions: [nightly]                  # nightly/predictions/ is tonight's batch output
      default_version: nightly
      runtime_options:
        key: id
        fallback_version: "2"              # models/breast_cancer/2, scored on a miss
        fallback_class: models.breast_cancer.model:BreastCancerClassifier

Parquet outputs are read into memory at load (one dict from key to row); SQLite files are
queried per request. Lookups are counted in ``servinglib_precomputed_lookups_total``
(labels model, version, result = hit | miss) and in :attr:`PrecomputedModel.hits` /
:attr:`PrecomputedModel.misses`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servinglib.errors import InvalidInputError, ModelLoadError
from servinglib.lifecycle.importing import import_model_class
from servinglib.lifecycle.selftest import load_test_data, run_selftests
from servinglib.model import Model, ModelSettings

__all__ = ["PrecomputedModel"]

_ADDED = ("model", "version", "error")  # columns batch-predict adds around the outputs


class _Table:
    """Rows of a batch output by key, from Parquet (in memory) or SQLite (queried)."""

    def __init__(self, path: Path, key: str) -> None:
        self._key = key
        self._lock = threading.Lock()
        self._rows: dict[Any, int] = {}
        self._sqlite: sqlite3.Connection | None = None
        if path.suffix in (".sqlite", ".db"):
            self._open_sqlite(path)
        else:
            self._open_parquet(path)

    def _open_parquet(self, path: Path) -> None:
        try:
            import pyarrow.dataset as ds
        except ImportError as e:
            raise ModelLoadError(
                "runtime: precomputed reads Parquet with pyarrow; install it with "
                "pip install 'servinglib[batch]'"
            ) from e
        files = (
            sorted(str(p) for p in path.iterdir() if p.suffix == ".parquet")
            if path.is_dir()
            else [str(path)]
        )
        table = ds.dataset(files, format="parquet").to_table()
        if self._key not in table.column_names:
            raise ModelLoadError(
                f"{path} has no column {self._key!r} (runtime_options.key); its columns are "
                f"{table.column_names}"
            )
        metadata = table.schema.metadata or {}
        self.json_columns = set(json.loads(metadata.get(b"servinglib.json_columns", b"[]")))
        self.outputs = [c for c in table.column_names if c not in (self._key, *_ADDED)]
        self._columns = {name: table.column(name).to_pylist() for name in self.outputs}
        self._errors = table.column("error").to_pylist() if "error" in table.column_names else []
        self._rows = {k: i for i, k in enumerate(table.column(self._key).to_pylist())}

    def _open_sqlite(self, path: Path) -> None:
        self._sqlite = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        info = self._sqlite.execute("PRAGMA table_info(predictions)").fetchall()
        if not info:
            raise ModelLoadError(f"{path} has no table 'predictions'; write the batch output there")
        names = [row[1] for row in info]
        if self._key not in names:
            raise ModelLoadError(f"table predictions of {path} has no column {self._key!r}")
        self.json_columns = {row[1] for row in info if str(row[2]).upper() == "JSON"}
        self.outputs = [c for c in names if c not in (self._key, *_ADDED)]
        # column names come from the file itself and are quoted; the key value is bound
        columns = ", ".join(_quoted(c) for c in self.outputs)
        error = "error" if "error" in names else "NULL"
        self._select = f"SELECT {columns}, {error} FROM predictions WHERE {_quoted(self._key)} = ?"  # noqa: S608

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, key: Any) -> dict[str, Any] | None:
        """The outputs of ``key``'s row, or None when it has none (or only an error)."""
        if self._sqlite is not None:
            with self._lock:
                found = self._sqlite.execute(self._select, (key,)).fetchone()
            if found is None or found[-1] is not None:
                return None
            values = dict(zip(self.outputs, found[:-1], strict=True))
        else:
            row = self._rows.get(key)
            if row is None or (self._errors and self._errors[row] is not None):
                return None
            values = {name: self._columns[name][row] for name in self.outputs}
        return {
            name: json.loads(v) if name in self.json_columns and isinstance(v, str) else v
            for name, v in values.items()
        }


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class PrecomputedModel(Model):
    """Answers from a batch output; a miss goes to the live ``fallback_version``."""

    platform = "servinglib_precomputed"

    hits: int = 0
    misses: int = 0

    def load(self, path: Path) -> None:
        """Read the batch output of ``path`` and load the fallback version, if any."""
        options = dict(self.settings.runtime_options)
        key = options.get("key")
        if not key:
            raise ModelLoadError(
                f"model {self.settings.name!r}: runtime: precomputed needs runtime_options.key, "
                "the feature that picks a row (the --id-column of the batch job)"
            )
        self._key: str = key
        source = path / options.get("file", "predictions")
        if not source.exists():
            raise ModelLoadError(
                f"{source} does not exist; copy the output directory of servinglib "
                "batch-predict there (or set runtime_options.file)"
            )
        self._table = _Table(source, key)
        self._unwrap = self._table.outputs == ["output"]
        self._lock = threading.Lock()
        self._fallback = self._load_fallback(path, options)
        self._counter = _lookup_counter()

    def _load_fallback(self, path: Path, options: Mapping[str, Any]) -> Model | None:
        version = options.get("fallback_version")
        if version is None:
            return None
        class_ref = options.get("fallback_class")
        if not class_ref:
            raise ModelLoadError(
                f"model {self.settings.name!r}: fallback_version {version!r} needs "
                "runtime_options.fallback_class, the Model class that scores it"
            )
        root = Path(options.get("config_root", path.parent))
        python_path = [Path(p) for p in options.get("python_path", [])]
        directory = path.parent / str(version)
        if not directory.is_dir():
            raise ModelLoadError(f"fallback_version {version!r} has no directory {directory}")
        fallback = import_model_class(class_ref, root, python_path)()
        fallback.configure(
            ModelSettings(
                name=self.settings.name,
                version=str(version),
                workers=self.settings.workers,
                inputs=self.settings.inputs,
                outputs=self.settings.outputs,
            )
        )
        fallback.load(directory)
        cases = load_test_data(directory) + list(fallback.self_test_cases())
        report = run_selftests(fallback, cases)
        if not report.passed:
            raise ModelLoadError(f"fallback_version {version!r}: {report.failure_summary()}")
        return fallback

    def _lookup(self, features: Any) -> tuple[Any, Any]:
        if not isinstance(features, Mapping) or self._key not in features:
            raise InvalidInputError(
                f"features must hold {self._key!r}, the key of the precomputed predictions",
                field=self._key,
            )
        found = self._table.get(features[self._key])
        if found is None:
            return None, {k: v for k, v in features.items() if k != self._key}
        return (found["output"] if self._unwrap else found), None

    def predict(self, features: Any) -> Any:
        """The precomputed answer for ``features[key]``, or the fallback's on a miss."""
        return self.predict_batch([features])[0]

    def predict_batch(self, batch: Sequence[Any]) -> list[Any]:
        """Look every request up; misses go to the fallback in one ``predict_batch``."""
        answers: list[Any] = []
        missed: list[tuple[int, Any]] = []
        for i, features in enumerate(batch):
            answer, miss = self._lookup(features)
            answers.append(answer)
            if miss is not None:
                missed.append((i, miss))
        self._count(len(batch) - len(missed), len(missed))
        if missed:
            if self._fallback is None:
                key = batch[missed[0][0]][self._key]
                raise InvalidInputError(
                    f"no precomputed prediction for {self._key}={key!r} in version "
                    f"{self.settings.version!r}, and no fallback_version is configured",
                    field=self._key,
                )
            live = self._fallback.predict_batch(
                [self._fallback.prepare(features) for _, features in missed]
            )
            for (i, _), output in zip(missed, live, strict=True):
                answers[i] = output
        return answers

    def _count(self, hits: int, misses: int) -> None:
        with self._lock:
            self.hits += hits
            self.misses += misses
        if hits:
            self._counter.labels(self.settings.name, self.settings.version, "hit").inc(hits)
        if misses:
            self._counter.labels(self.settings.name, self.settings.version, "miss").inc(misses)


def _lookup_counter() -> Any:
    """The lookup counter; under gunicorn it lands in the shared multiprocess directory."""
    from prometheus_client import CollectorRegistry, Counter

    return Counter(
        "servinglib_precomputed_lookups",
        "Requests a precomputed version looked up, by result (hit: answered from the batch "
        "output, miss: answered by fallback_version or refused).",
        ["model", "version", "result"],
        registry=CollectorRegistry(),
    )
