"""scikit-learn, XGBoost and LightGBM models → ONNX, verified and raced against the native path.

:func:`export_tabular` loads a version directory with the tabular runtime that serves it
(``runtime: sklearn|xgboost|lightgbm``), converts the model (:mod:`._tabular_convert`),
and checks ONNX Runtime against the runtime's own answers on the sample rows and on random
rows of the same spread (and, for XGBoost and LightGBM, with missing values): labels must
be equal, numbers within ``atol + rtol·|y|``; beyond that the export is refused and
nothing is written. The worst difference is reported. Then both paths are measured
interleaved on this machine, one thread each: p50 of a one-row request and rows/s at
``batch_size``, so the result says which path to serve this model with. The file appears at
``path`` (with a ``test_data.json`` for ``runtime: onnx`` next to it, unless one exists)
only once verified.

Example::

    result = export_tabular(Path("models/diabetes/1"), "xgboost", Path("onnx/1/model.onnx"))
    print(result.max_abs_diff, result.faster)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.errors import ServinglibError
from servinglib.model import ModelSettings, TensorSpec
from servinglib.optimize._deps import require
from servinglib.optimize._files import StagedOutput
from servinglib.optimize._session import open_session
from servinglib.optimize._tabular_convert import convert_tabular
from servinglib.optimize.errors import ExportVerificationError, OptimizeError
from servinglib.optimize.measure import MeasureSettings, measure_latency, measure_throughput
from servinglib.optimize.samples import Feed

__all__ = ["TABULAR_RUNTIMES", "PathFigures", "TabularExport", "export_tabular", "load_tabular"]

TABULAR_RUNTIMES = ("sklearn", "xgboost", "lightgbm")
RANDOM_ROWS = 256
SELF_TEST_ROWS = 3


@dataclass(frozen=True)
class PathFigures:
    """One serving path measured: p50 of a one-row call, rows/s at the batch size."""

    p50_ms: float
    rows_per_s: float


@dataclass(frozen=True)
class TabularExport:
    """What was exported, how closely ONNX Runtime matches the runtime, and which is faster."""

    path: Path
    runtime: str
    rows_checked: int
    max_abs_diff: float
    batch_size: int
    native: PathFigures
    onnx: PathFigures
    self_tests: Path | None = None
    checked: tuple[str, ...] = field(default=())

    @property
    def faster(self) -> str:
        """``onnx`` or ``native``: the path with more rows/s at the batch size."""
        return "onnx" if self.onnx.rows_per_s > self.native.rows_per_s else "native"


def load_tabular(
    version_dir: Path,
    runtime: str,
    *,
    name: str = "model",
    options: Mapping[str, Any] | None = None,
    inputs: Sequence[TensorSpec] = (),
    threads: int = 1,
) -> Any:
    """The version loaded by the runtime that serves it, with ``threads`` threads per call.

    Raises:
        OptimizeError: unknown runtime, or the runtime refuses the version.
    """
    if runtime not in TABULAR_RUNTIMES:
        raise OptimizeError(f"runtime {runtime!r} is not tabular; use one of {TABULAR_RUNTIMES}")
    module = __import__(f"servinglib.runtimes.tabular.{runtime}", fromlist=["_"])
    kind = {"sklearn": "SklearnModel", "xgboost": "XGBoostModel", "lightgbm": "LightGBMModel"}
    model = getattr(module, kind[runtime])()
    # the ONNX graph answers class indexes and both outputs: compare like with like
    kept = {k: v for k, v in (options or {}).items() if k not in ("classes", "outputs")}
    kept["intra_op_threads"] = threads
    model.configure(
        ModelSettings(name, version_dir.name, runtime_options=kept, inputs=tuple(inputs))
    )
    try:
        model.load(version_dir)
    except ServinglibError as e:
        raise OptimizeError(f"runtime: {runtime} cannot load {version_dir}: {e}") from e
    return model


def sample_rows(model: Any, version_dir: Path, sample: Path | None) -> np.ndarray:
    """The rows to verify on: an ``.npz`` (one ``[rows, features]`` array, or one array per
    feature) or, by default, the inputs of the version's ``test_data.json``.

    Raises:
        OptimizeError: no rows, or rows the model refuses.
    """
    try:
        if sample is not None:
            if sample.suffix != ".npz" or not sample.is_file():
                raise OptimizeError(f"--sample {sample}: expected an existing .npz of rows")
            with np.load(sample, allow_pickle=False) as archive:
                arrays = {name: archive[name] for name in archive.files}
            arrays = {name: _as_bytes(array) for name, array in arrays.items()}
            if len(arrays) == 1 and next(iter(arrays.values())).ndim == 2:
                matrix = next(iter(arrays.values()))
                return np.asarray(model.prepare({"rows": matrix.tolist()}).matrix)
            return np.asarray(model.prepare(arrays).matrix)
        path = version_dir / "test_data.json"
        if not path.is_file():
            raise OptimizeError(
                f"{version_dir} has no test_data.json; pass --sample rows.npz with rows to "
                "verify the export on"
            )
        cases = json.loads(path.read_text(encoding="utf-8"))["cases"]
        matrices = [np.asarray(model.prepare(case["input"]).matrix) for case in cases]
    except ServinglibError as e:
        raise OptimizeError(f"the sample rows do not fit model {model.settings.name!r}: {e}") from e
    if not matrices:
        raise OptimizeError(f"{path} has no cases; pass --sample rows.npz")
    return np.concatenate(matrices)


def _as_bytes(array: np.ndarray) -> np.ndarray:
    """Strings from an .npz (fixed-width) as v2 BYTES tensors arrive: objects of bytes."""
    if array.dtype.kind not in "US":
        return array
    encoded = [v.encode() if isinstance(v, str) else bytes(v) for v in array.ravel()]
    return np.array(encoded, dtype=object).reshape(array.shape)


def _variants(model: Any, rows: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The sample, random rows of its spread and, where missing values are allowed, holes."""
    variants = [("sample", rows)]
    if rows.dtype.kind == "O":
        return variants
    rng = np.random.default_rng(0)
    spread = rows.std(axis=0) if len(rows) > 1 else np.abs(rows[0]) * 0.1
    spread = np.where(spread > 0, spread, 1.0)
    drawn = rng.normal(rows.mean(axis=0), spread, (RANDOM_ROWS, rows.shape[1]))
    variants.append(("random", drawn))
    if model.layout.nullable:
        holes = drawn.copy()
        holes[rng.random(holes.shape) < 0.2] = np.nan
        variants.append(("missing", holes))
    return variants


def _feed(session: Any, model: Any, matrix: np.ndarray) -> Feed:
    """The ONNX inputs for ``matrix``: the matrix, or one ``[rows, 1]`` column per feature."""
    specs = {node.name: node.type for node in session.raw.get_inputs()}
    if len(specs) == 1:
        ((name, kind),) = specs.items()
        dtype = np.float32 if kind == "tensor(float)" else np.float64
        return {name: np.ascontiguousarray(matrix, dtype=dtype)}
    feed = {}
    for j, feature in enumerate(model.layout.names):
        column = matrix[:, j : j + 1]
        if specs[feature] == "tensor(string)":
            feed[feature] = column.astype(str).astype(object)
        else:
            feed[feature] = column.astype(np.float64)
    return feed


def _compare(
    label: str,
    model: Any,
    want: dict[str, np.ndarray],
    got: dict[str, np.ndarray],
    atol: float,
    rtol: float,
) -> float:
    worst = 0.0
    for name, expected in want.items():
        actual = got[name]
        if expected.dtype.kind in "iuO" or (name == "predict" and model.classes):
            wrong = int(np.sum(np.asarray(actual).astype(str) != expected.astype(str)))
            if wrong:
                raise ExportVerificationError(
                    f"ONNX Runtime answers another class than runtime: {model.platform} on "
                    f"{wrong} of {len(expected)} {label} rows; the converted model is not "
                    "faithful: keep serving the native runtime"
                )
            continue
        error = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
        allowed = atol + rtol * np.abs(expected.astype(np.float64))
        if error.size and np.any(error > allowed):
            raise ExportVerificationError(
                f"output {name!r} of the ONNX model differs from runtime: {model.platform} by "
                f"up to {float(np.nanmax(error)):.3g} (> {atol} + {rtol}·|y|) on the {label} "
                "rows (a tree converted to float32 thresholds takes another branch near a "
                "split); the export is refused: keep serving the native runtime, or pass a "
                "larger --atol/--rtol if that difference is acceptable"
            )
        worst = max(worst, float(error.max()) if error.size else 0.0)
    return worst


class _Native:
    """The runtime's own batched call, shaped as a measured session."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def run(self, feed: Feed) -> Any:
        return self.model._run(feed["rows"], self.model._outputs)


class _Onnx:
    def __init__(self, session: Any, model: Any) -> None:
        self.session, self.model = session, model

    def run(self, feed: Feed) -> Any:
        return self.session.run(_feed(self.session, self.model, feed["rows"]))


def export_tabular(
    version_dir: Path,
    runtime: str,
    path: Path,
    *,
    sample: Path | None = None,
    name: str = "model",
    options: Mapping[str, Any] | None = None,
    inputs: Sequence[TensorSpec] = (),
    atol: float = 1e-4,
    rtol: float = 1e-3,
    measure: MeasureSettings | None = None,
) -> TabularExport:
    """Convert the version's model to ONNX at ``path``, verify it, measure both paths.

    Raises:
        OptimizeError: the model cannot be loaded or converted, or the rows do not fit it.
        ExportVerificationError: ONNX Runtime disagrees with the runtime beyond tolerance.
    """
    onnx = require("onnx", "writing an ONNX model")
    settings = measure or MeasureSettings()
    model = load_tabular(
        version_dir, runtime, name=name, options=options, inputs=inputs, threads=settings.threads
    )
    rows = sample_rows(model, version_dir, sample)
    proto = convert_tabular(model)
    with StagedOutput(path) as staged:
        onnx.save(proto, str(staged.path))
        session = open_session(staged.path, threads=settings.threads)
        worst, checked, count = 0.0, [], 0
        for label, matrix in _variants(model, rows):
            want = model._run(matrix, model._outputs)
            got = dict(
                zip(session.outputs, session.run(_feed(session, model, matrix)), strict=True)
            )
            worst = max(worst, _compare(label, model, want, got, atol, rtol))
            checked.append(f"{label}: {len(matrix)} rows")
            count += len(matrix)
        paths = {"native": _Native(model), "onnx": _Onnx(session, model)}
        one = {"rows": rows[:1]}
        batch = {"rows": np.resize(rows, (settings.batch_size, rows.shape[1]))}
        latency = measure_latency(paths, one, settings)  # type: ignore[arg-type]
        throughput = measure_throughput(paths, batch, settings)  # type: ignore[arg-type]
        staged.commit()
    tests = _write_self_tests(path, session, model, rows[:SELF_TEST_ROWS], atol, rtol)
    figures = {
        key: PathFigures(latency[key].p50_ms, throughput[key].samples_per_s) for key in paths
    }
    return TabularExport(
        path=path,
        runtime=runtime,
        rows_checked=count,
        max_abs_diff=worst,
        batch_size=settings.batch_size,
        native=figures["native"],
        onnx=figures["onnx"],
        self_tests=tests,
        checked=tuple(checked),
    )


def _write_self_tests(
    path: Path, session: Any, model: Any, rows: np.ndarray, atol: float, rtol: float
) -> Path | None:
    """``test_data.json`` next to the ONNX file: the verified answers on the first rows."""
    target = path.parent / "test_data.json"
    if target.exists():
        return None
    cases = []
    for i, row in enumerate(rows):
        feed = _feed(session, model, row[None, :])
        answers = dict(zip(session.outputs, session.run(feed), strict=True))
        cases.append(
            {
                "name": f"sample row {i}",
                "input": {name: value.tolist() for name, value in feed.items()},
                "expected": {name: value.tolist() for name, value in answers.items()},
                "tolerance": {"atol": atol, "rtol": rtol},
            }
        )
    target.write_text(json.dumps({"cases": cases}, indent=1) + "\n", encoding="utf-8")
    return target
