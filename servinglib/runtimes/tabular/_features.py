"""A tabular model's features: requests of every protocol to one matrix of rows.

Four request forms reach a tabular model:

- ``/infer`` one row by name: ``{"age": 41, "bmi": 22.5, ...}``;
- ``/infer`` one row as a list, in the model's feature order: ``[41, 22.5, ...]``;
- ``/infer`` many rows: ``{"rows": [{...}, [...], ...]}`` (each by name or as a list);
- Open Inference v2 tensors: one matrix ``[rows, features]`` (``input`` by default), or one
  column ``[rows]`` per feature when ``inputs:`` in servinglib.yaml declares them (the way
  to send categoricals as BYTES).

Each becomes :class:`Rows`: a 2-D array in the model's feature order (float, or object when
a feature is categorical) and the form to answer in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from servinglib.errors import InvalidInputError, ModelLoadError
from servinglib.model import TensorSpec

__all__ = ["FeatureLayout", "Rows", "layout_from"]

Form = Literal["one", "rows", "tensors"]

_NUMBER_TYPES = (int, float)
_NUMERIC_DATATYPES = frozenset(
    {"FP16", "FP32", "FP64", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32"}
    | {"UINT64", "BOOL"}
)


@dataclass(frozen=True, slots=True)
class Rows:
    """One request's rows in the model's feature order, and the form to answer in."""

    matrix: np.ndarray
    form: Form


@dataclass(frozen=True)
class FeatureLayout:
    """How a model's features arrive: names in fitting order, which are strings, v2 tensors.

    Attributes:
        model: the model name, for messages.
        names: the features in the order the estimator was fitted with.
        categorical: the features sent as strings (BYTES tensors).
        tensor: the v2 matrix input's name; None when each feature is a v2 input of its own.
        datatype: the Open Inference datatype of the matrix (or of numeric columns).
        nullable: whether ``null`` (NaN in tensors) is a missing value the model handles.
    """

    model: str
    names: tuple[str, ...]
    categorical: frozenset[str] = frozenset()
    tensor: str | None = "input"
    datatype: str = "FP64"
    nullable: bool = False
    _index: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {name: i for i, name in enumerate(self.names)})

    def specs(self) -> tuple[TensorSpec, ...]:
        """The v2 inputs: the matrix, or one column per feature."""
        if self.tensor is not None:
            return (TensorSpec(self.tensor, self.datatype, (-1, len(self.names))),)
        return tuple(
            TensorSpec(name, "BYTES" if name in self.categorical else self.datatype, (-1,))
            for name in self.names
        )

    def rows(self, features: Any) -> Rows:
        """The rows of one request, in any of the four forms.

        Raises:
            InvalidInputError: naming the row, the feature and what was wrong.
        """
        if (
            type(features) is dict
            and features
            and all(type(v) is np.ndarray for v in features.values())
        ):
            return Rows(self._from_tensors(features), "tensors")
        if (
            type(features) is dict
            and len(features) == 1
            and "rows" in features
            and self.names != ("rows",)
        ):
            return Rows(self._from_rows(features["rows"]), "rows")
        return Rows(self._matrix([self._row(features, "features")]), "one")

    def _from_rows(self, raw: Any) -> np.ndarray:
        if type(raw) is not list or not raw:
            raise InvalidInputError(
                f"features.rows of model {self.model!r} must be a non-empty list of rows "
                "(each an object by feature name or a list in feature order)",
                field="rows",
            )
        return self._matrix([self._row(row, f"features.rows[{i}]") for i, row in enumerate(raw)])

    def _row(self, row: Any, where: str) -> list[Any]:
        names = self.names
        if type(row) is dict:
            if len(row) != len(names) or not all(name in row for name in names):
                missing = [name for name in names if name not in row]
                unknown = sorted(str(k) for k in row if k not in self._index)
                raise InvalidInputError(
                    f"{where}: model {self.model!r} takes the features {_listed(names)}; "
                    f"missing {_listed(missing)}, unknown {_listed(unknown)}",
                    field=(missing or unknown or ["features"])[0],
                )
            values = [row[name] for name in names]
        elif type(row) is list:
            if len(row) != len(names):
                raise InvalidInputError(
                    f"{where}: a row as a list holds the {len(names)} features "
                    f"{_listed(names)} in that order; got {len(row)} values",
                    field="features",
                )
            values = row
        else:
            raise InvalidInputError(
                f"{where}: model {self.model!r} takes an object of features by name "
                f"({_listed(names, 3)}), a list in that order, or {{'rows': [...]}}; "
                f"got {type(row).__name__}",
                field="features",
            )
        for name, value in zip(names, values, strict=True):
            kind = type(value)
            if kind in _NUMBER_TYPES and name not in self.categorical:
                continue
            self._check_value(name, value, where)
        return values

    def _check_value(self, name: str, value: Any, where: str) -> None:
        if value is None and self.nullable:
            return
        if name in self.categorical:
            if type(value) is str:
                return
            wanted = "a string (a categorical feature)"
        else:
            wanted = "a number" + (" or null (missing)" if self.nullable else "")
        raise InvalidInputError(
            f"{where}.{name} of model {self.model!r} must be {wanted}; got {value!r:.60}",
            field=name,
        )

    def _matrix(self, rows: list[list[Any]]) -> np.ndarray:
        if self.categorical:
            matrix = np.empty((len(rows), len(self.names)), dtype=object)
            matrix[:] = rows
            return matrix
        try:
            return np.asarray(rows, dtype=np.float64)  # None becomes NaN
        except OverflowError as e:
            raise InvalidInputError(
                f"a feature of model {self.model!r} is an integer too large for a float64: "
                "send numbers within ±1.8e308",
                field="features",
            ) from e

    def _from_tensors(self, tensors: Mapping[str, np.ndarray]) -> np.ndarray:
        if self.tensor is not None:
            array = tensors.get(self.tensor)
            if array is None or len(tensors) != 1:
                raise InvalidInputError(
                    f"model {self.model!r} takes one input {self.tensor!r} of shape "
                    f"[rows, {len(self.names)}]; got {_listed(sorted(tensors))}",
                    field=self.tensor,
                )
            if array.ndim != 2 or array.shape[1] != len(self.names) or not array.shape[0]:
                raise InvalidInputError(
                    f"input {self.tensor!r} of model {self.model!r} has shape "
                    f"{list(array.shape)}; expected [rows >= 1, {len(self.names)}] (features "
                    f"{_listed(self.names, 3)} in that order)",
                    field=self.tensor,
                )
            return self._checked(self.tensor, _numeric(self.model, self.tensor, array))
        missing = [name for name in self.names if name not in tensors]
        unknown = sorted(set(tensors) - set(self.names))
        if missing or unknown:
            raise InvalidInputError(
                f"model {self.model!r} takes one input per feature {_listed(self.names)}; "
                f"missing {_listed(missing)}, unknown {_listed(unknown)}",
                field=(missing or unknown)[0],
            )
        columns = [self._column(name, tensors[name]) for name in self.names]
        sizes = {len(column) for column in columns}
        if len(sizes) != 1 or not columns[0].size:
            raise InvalidInputError(
                f"the inputs of model {self.model!r} must hold the same number of rows "
                f"(at least one); got {sorted(sizes)}",
                field=self.names[0],
            )
        if self.categorical:
            matrix = np.empty((len(columns[0]), len(columns)), dtype=object)
            for j, column in enumerate(columns):
                matrix[:, j] = column
            return matrix
        return np.column_stack(columns)

    def _column(self, name: str, array: np.ndarray) -> np.ndarray:
        if array.ndim == 2 and array.shape[1] == 1:
            array = array[:, 0]
        if array.ndim != 1:
            raise InvalidInputError(
                f"input {name!r} of model {self.model!r} has shape {list(array.shape)}; a "
                "feature is a column: [rows] or [rows, 1]",
                field=name,
            )
        if name not in self.categorical:
            return self._checked(name, _numeric(self.model, name, array))
        if array.dtype.kind != "O":
            raise InvalidInputError(
                f"input {name!r} of model {self.model!r} is categorical: send it as BYTES",
                field=name,
            )
        try:
            return np.array([v.decode("utf-8") for v in array], dtype=object)
        except (AttributeError, UnicodeDecodeError) as e:
            raise InvalidInputError(
                f"input {name!r} of model {self.model!r} must hold UTF-8 strings", field=name
            ) from e

    def _checked(self, name: str, array: np.ndarray) -> np.ndarray:
        if array.dtype.kind != "f":
            return array
        bad = np.isinf(array) if self.nullable else ~np.isfinite(array)
        if bad.any():
            allowed = "NaN is a missing value; " if self.nullable else ""
            raise InvalidInputError(
                f"input {name!r} of model {self.model!r} holds "
                f"{'Infinity' if self.nullable else 'NaN or Infinity'} at flat position "
                f"{int(np.flatnonzero(bad.reshape(-1))[0])}; {allowed}send finite numbers",
                field=name,
            )
        return array


def _listed(names: Sequence[str], most: int = 8) -> str:
    """A list of names for a message, cut after ``most`` of them."""
    shown = ", ".join(repr(n) for n in names[:most])
    return f"[{shown}, ... {len(names)} in all]" if len(names) > most else f"[{shown}]"


def _numeric(model: str, name: str, array: np.ndarray) -> np.ndarray:
    if array.dtype.kind in "biu":
        return array.astype(np.float64)
    if array.dtype.kind != "f":
        raise InvalidInputError(
            f"input {name!r} of model {model!r} must be numeric (FP32, FP64 or INT); "
            f"got {array.dtype}",
            field=name,
        )
    return array


def layout_from(
    model: str,
    fitted: Sequence[str] | None,
    count: int,
    declared: Sequence[TensorSpec],
    *,
    datatype: str,
    nullable: bool,
) -> FeatureLayout:
    """The layout of a model: the fitted feature names, or those ``inputs:`` declares.

    ``fitted`` are the names the estimator knows (``feature_names_in_``, a booster's feature
    names), ``count`` its number of features. ``declared`` (``inputs:`` in servinglib.yaml)
    either names one matrix input ``[-1, count]`` or one input per feature (BYTES ones are
    categorical); without it, features the model does not name are ``f0``, ``f1``, ...

    Raises:
        ModelLoadError: the declared inputs do not match the model's features.
    """
    names = tuple(fitted) if fitted else tuple(f"f{i}" for i in range(count))
    if not declared:
        return FeatureLayout(model, names, datatype=datatype, nullable=nullable)
    if len(declared) == 1 and len(declared[0].shape) == 2:
        spec = declared[0]
        if spec.shape[1] not in (-1, count) or spec.datatype not in _NUMERIC_DATATYPES:
            raise ModelLoadError(
                f"inputs: of model {model!r} declares {spec.name!r} {spec.datatype} "
                f"{list(spec.shape)}; the model takes a numeric matrix [-1, {count}]"
            )
        return FeatureLayout(
            model, names, tensor=spec.name, datatype=spec.datatype, nullable=nullable
        )
    given = [spec.name for spec in declared]
    if (fitted and sorted(given) != sorted(names)) or len(given) != count:
        raise ModelLoadError(
            f"inputs: of model {model!r} declares {given}; the model was fitted on "
            f"{list(names)}: declare one input per feature, the same names"
        )
    numeric = {spec.datatype for spec in declared if spec.datatype != "BYTES"}
    if len(numeric) > 1 or not numeric <= _NUMERIC_DATATYPES:
        raise ModelLoadError(
            f"inputs: of model {model!r} declares the datatypes {sorted(numeric)}; declare "
            "the numeric features with one datatype (FP64, FP32 or INT64) and categorical "
            "ones as BYTES"
        )
    return FeatureLayout(
        model,
        names if fitted else tuple(given),
        categorical=frozenset(spec.name for spec in declared if spec.datatype == "BYTES"),
        tensor=None,
        datatype=numeric.pop() if numeric else datatype,
        nullable=nullable,
    )
