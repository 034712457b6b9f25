"""Reference profiles: what each feature and output of a version looked like in training.

A profile is ``profile.json`` in the version directory, built by ``servinglib profile``.
Each field (a top-level feature or output) is reduced to a scalar or a category and binned:

- ``numeric``: quantile bin edges, mean, std, min/max;
- ``categorical``: the top-k categories (strings, booleans), everything else in ``other``;
- ``text``: the string's length, binned like a numeric field;
- ``length``, ``norm``, ``top_class``: arrays by length, by L2 norm (embeddings), or by the
  index of their largest entry (probability vectors).

Every field also keeps its null share and the reference share of each bin.

Example::

    profile = build_profile(rows, outputs)
    profile.save(version_dir / "profile.json")
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servinglib.errors import ServinglibError

__all__ = [
    "DEFAULT_WINDOW",
    "MAX_WINDOW_SLOTS",
    "PROFILE_FILE",
    "FieldProfile",
    "Profile",
    "ProfileError",
    "WindowSpec",
    "all_missing",
    "array_scalar",
    "build_profile",
    "default_profile_path",
    "fields_of",
    "reduce_value",
    "value_margin",
]

PROFILE_FILE = "profile.json"
FORMAT_VERSION = 1
MAX_FIELDS = 64
NUMERIC_BINS = 10
TOP_K = 20
# Slots of the sliding window: the live table is slots x (bins + 4 quality counters per
# field) int64 per version in every worker (64 fields of 21 bins: 1440 slots ~ 18 MiB);
# more would let one profile exhaust the server's memory and disk.
MAX_WINDOW_SLOTS = 1440
_ARRAY_KINDS = ("length", "norm", "top_class")


class ProfileError(ServinglibError):
    """A profile could not be built, read or validated."""


@dataclass(frozen=True)
class WindowSpec:
    """The sliding window live counts are compared over.

    The window covers the last ``seconds`` (in ``slots`` time slots) and, when ``requests``
    is set, only the newest slots needed to hold that many requests.
    """

    seconds: float = 600.0
    slots: int = 10
    requests: int | None = None

    @property
    def slot_seconds(self) -> float:
        """Length of one time slot."""
        return self.seconds / self.slots

    def problems(self, slots_name: str = "window.slots") -> list[str]:
        """What makes this window unusable; ``slots_name`` is what the user set it as."""
        found = []
        if self.seconds <= 0 or self.slots < 1:
            found.append("window.seconds must be > 0 and window.slots >= 1")
        if self.slots > MAX_WINDOW_SLOTS:
            found.append(
                f"{slots_name} {self.slots} is above the limit {MAX_WINDOW_SLOTS} (each slot is "
                "a row of counts, 8 bytes per bin of every field, held per version in every "
                f"worker's memory and drift file); use at most {MAX_WINDOW_SLOTS}, e.g. 60 "
                "slots of 10 s for a 600 s window"
            )
        if self.requests is not None and self.requests < 1:
            found.append(f"window.requests {self.requests} must be 1 or more (or unset)")
        return found


DEFAULT_WINDOW = WindowSpec()


@dataclass(frozen=True)
class FieldProfile:
    """The reference distribution of one feature or output."""

    name: str
    role: str  # "feature" or "output"
    kind: str
    reference: tuple[float, ...]  # share of the non-null reference values in each bin
    edges: tuple[float, ...] = ()  # interior bin edges (numeric-like kinds)
    categories: tuple[str, ...] = ()  # top-k (categorical, top_class); bin k is "other"
    minimum: float | None = None
    maximum: float | None = None
    mean: float | None = None
    std: float | None = None
    null_share: float = 0.0
    count: int = 0

    @property
    def bins(self) -> int:
        """Number of live-count bins."""
        return len(self.reference)

    @property
    def is_categorical(self) -> bool:
        """Whether values are categories (else they are binned on ``edges``)."""
        return self.kind in ("categorical", "top_class")


@dataclass(frozen=True)
class Profile:
    """Every profiled field of one model version, and the monitoring window."""

    fields: tuple[FieldProfile, ...]
    window: WindowSpec = DEFAULT_WINDOW
    source: str = ""

    def save(self, path: Path) -> None:
        """Write the profile as JSON."""
        document = {
            "format_version": FORMAT_VERSION,
            "source": self.source,
            "window": asdict(self.window),
            "fields": [asdict(f) for f in self.fields],
        }
        # allow_nan=False: a profile is strict JSON, as the drift report built from it
        path.write_text(json.dumps(document, indent=1, allow_nan=False) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Profile:
        """Read and validate ``profile.json``.

        Raises:
            ProfileError: naming the file, the field and what is wrong.
        """
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            if document.get("format_version") != FORMAT_VERSION:
                raise ValueError(f"format_version must be {FORMAT_VERSION}")
            window = WindowSpec(**document.get("window", {}))
            fields = tuple(_field_from_json(raw) for raw in document["fields"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ProfileError(
                f"{path}: not a valid profile ({e}); rebuild it with `servinglib profile`"
            ) from e
        profile = cls(fields, window, str(document.get("source", "")))
        problems = profile.problems()
        if problems:
            raise ProfileError(f"{path}: {problems[0]}; rebuild it with `servinglib profile`")
        return profile

    def problems(self) -> list[str]:
        """What makes this profile unusable (empty when it is fine)."""
        found = self.window.problems()
        for f in self.fields:
            where = f"{f.role} {f.name!r}"
            expected = len(f.categories) + 1 if f.is_categorical else len(f.edges) + 1
            if f.bins != expected:
                found.append(f"{where}: {f.bins} reference shares for {expected} bins")
            elif f.count and not math.isclose(sum(f.reference), 1.0, abs_tol=1e-6):
                found.append(f"{where}: reference shares add up to {sum(f.reference)}, not 1")
            if list(f.edges) != sorted(f.edges):
                found.append(f"{where}: bin edges are not sorted")
            numbers = [*f.reference, *f.edges, f.minimum, f.maximum, f.mean, f.std, f.null_share]
            if any(n is not None and not math.isfinite(n) for n in numbers):
                found.append(f"{where}: holds NaN or Infinity, which JSON cannot carry")
        return found


def _field_from_json(raw: Mapping[str, Any]) -> FieldProfile:
    values = dict(raw)
    for key in ("reference", "edges", "categories"):
        values[key] = tuple(values.get(key, ()))
    return FieldProfile(**values)


def fields_of(value: Any, default_name: str) -> list[tuple[str, Any]]:
    """Top-level fields of a request's features or a model's answer."""
    if isinstance(value, Mapping):
        return [(str(k), v) for k, v in value.items()]
    return [(default_name, value)]


def reduce_value(value: Any) -> tuple[str, Any]:
    """The kind a raw value suggests and its reduced form (a float, str, or float array).

    Returns ``("null", None)`` for missing values and ``("other", None)`` for anything
    that cannot be profiled (nested objects).
    """
    if value is None:
        return "null", None
    if isinstance(value, bool | np.bool_):
        return "categorical", "true" if value else "false"
    if isinstance(value, int | float | np.integer | np.floating):
        number = float(value)
        return ("numeric", number) if math.isfinite(number) else ("null", None)
    if isinstance(value, str):
        return "string", value
    if isinstance(value, bytes):  # a BYTES tensor element (Open Inference)
        return "string", value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.size == 1:  # a one-element tensor: its value
        element = value.reshape(-1)[0]
        return reduce_value(element.item() if isinstance(element, np.generic) else element)
    if isinstance(value, np.ndarray) and value.dtype.kind in "iufb":
        return "array", value.astype(np.float64, copy=False).reshape(-1)
    if isinstance(value, list) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        return "array", np.asarray(value, dtype=np.float64)
    return "other", None


def build_profile(
    rows: Iterable[tuple[Any, Any]],
    window: WindowSpec = DEFAULT_WINDOW,
    source: str = "",
    bins: int = NUMERIC_BINS,
    top_k: int = TOP_K,
) -> Profile:
    """Profile ``(features, output)`` pairs (the output may be None when not known).

    Raises:
        ProfileError: no rows, or more than 64 fields.
    """
    columns: dict[tuple[str, str], list[Any]] = {}
    total = 0
    for features, output in rows:
        total += 1
        for role, value in (("feature", features), ("output", output)):
            if role == "output" and output is None:
                continue
            for name, item in fields_of(value, "input" if role == "feature" else "output"):
                columns.setdefault((role, name), []).append(item)
    if total == 0:
        raise ProfileError("no rows to profile; give a data file with at least one row")
    if len(columns) > MAX_FIELDS:
        raise ProfileError(
            f"{len(columns)} fields to profile; at most {MAX_FIELDS} are monitored: "
            "profile fewer columns"
        )
    fields = []
    for (role, name), values in columns.items():
        padded = values + [None] * (total - len(values))  # fields absent from some rows
        profiled = _profile_field(name, role, padded, bins, top_k)
        if profiled is not None:
            fields.append(profiled)
    return Profile(tuple(fields), window, source)


def _profile_field(
    name: str, role: str, values: Sequence[Any], bins: int, top_k: int
) -> FieldProfile | None:
    reduced = [reduce_value(v) for v in values]
    present = [(kind, v) for kind, v in reduced if kind != "null"]
    null_share = 1 - len(present) / len(values)
    kinds = Counter(kind for kind, _ in present)
    if not kinds:  # kept, so that its live values are counted and the gap shows
        return all_missing(name, role)
    kind = kinds.most_common(1)[0][0]
    usable = [v for k, v in present if k == kind]
    rows = len(values)
    if kind == "numeric":
        return _numeric(name, role, "numeric", usable, rows, bins)
    if kind == "categorical":
        return _categorical(name, role, "categorical", usable, null_share, top_k)
    if kind == "string":
        distinct = Counter(usable)
        covered = sum(n for _, n in distinct.most_common(top_k)) / len(usable)
        if covered >= 0.9 or len(distinct) <= len(usable) / 10:  # values repeat: categories
            return _categorical(name, role, "categorical", usable, null_share, top_k)
        return _numeric(name, role, "text", [float(len(v)) for v in usable], rows, bins)
    if kind == "array":
        array_kind = _array_kind(usable)
        scalars = [array_scalar(array_kind, v) for v in usable]
        if array_kind == "top_class":
            return _categorical(name, role, array_kind, scalars, null_share, top_k)
        return _numeric(name, role, array_kind, scalars, rows, bins)
    return None


def all_missing(name: str, role: str) -> FieldProfile:
    """A field whose every reference value is missing (null, NaN): one bin, null share 1."""
    return FieldProfile(name=name, role=role, kind="numeric", reference=(1.0,), null_share=1.0)


def _array_kind(arrays: Sequence[np.ndarray]) -> str:
    """``top_class`` for probability vectors, ``norm`` for fixed-length vectors, else length."""
    lengths = {a.size for a in arrays}
    if len(lengths) != 1 or lengths == {0}:
        return "length"
    stacked = np.stack(arrays)
    if stacked.min() >= 0 and stacked.max() <= 1 and np.allclose(stacked.sum(axis=1), 1, atol=1e-3):
        return "top_class"
    return "norm"


def array_scalar(kind: str, array: np.ndarray) -> Any:
    """What an array is monitored by: its length, its L2 norm, or its top class."""
    if kind == "length":
        return float(array.size)
    if kind == "norm":
        return float(np.linalg.norm(array))
    return str(int(np.argmax(array))) if array.size else ""


def _numeric(
    name: str, role: str, kind: str, values: Sequence[float], rows: int, bins: int
) -> FieldProfile:
    data = np.asarray(values, dtype=np.float64)
    data = data[np.isfinite(data)]  # NaN and infinities (an array's norm) count as missing
    if not data.size:
        return all_missing(name, role)
    edges = _edges(data, bins)
    counts = np.bincount(np.searchsorted(edges, data, side="right"), minlength=len(edges) + 1)
    with np.errstate(over="ignore"):  # values near the float limit: no mean, rather than inf
        mean, std = float(data.mean()), float(data.std())
    return FieldProfile(
        name=name,
        role=role,
        kind=kind,
        reference=tuple(float(c) for c in counts / counts.sum()),
        edges=edges,
        minimum=float(data.min()),
        maximum=float(data.max()),
        mean=mean if math.isfinite(mean) else None,
        std=std if math.isfinite(std) else None,
        null_share=1 - len(data) / rows,
        count=len(data),
    )


def _edges(data: np.ndarray, bins: int) -> tuple[float, ...]:
    """Quantile bin edges, none of them on a value of the reference.

    A quantile of discrete data (a constant, a count, a flag) falls on a value, and a bin
    edge there would split that value from itself once a live copy of it is off by a
    rounding (a float32 tensor, a sum computed in another order). Such an edge moves down
    to halfway to the next smaller value (or just below the smallest): the reference's
    counts per bin stay the same, and the value sits inside its bin.
    """
    distinct = np.unique(data)
    edges = []
    for quantile in np.unique(np.quantile(data, np.linspace(0, 1, bins + 1)[1:-1])):
        edge = float(quantile)
        at = int(np.searchsorted(distinct, edge))
        if at < distinct.size and distinct[at] == edge:
            edge = float(distinct[at - 1]) / 2 + edge / 2 if at else edge - value_margin(edge)
        edges.append(edge)
    return tuple(sorted(set(edges)))


def value_margin(value: float) -> float:
    """How far a live number may sit from a reference value and still be the same value."""
    return max(abs(value) * 1e-6, 1e-9)


def _categorical(
    name: str, role: str, kind: str, values: Sequence[str], null_share: float, top_k: int
) -> FieldProfile:
    distinct = Counter(values)
    top = [category for category, _ in distinct.most_common(top_k)]
    counts = [distinct[c] for c in top]
    other = len(values) - sum(counts)
    shares = [c / len(values) for c in [*counts, other]]
    return FieldProfile(
        name=name,
        role=role,
        kind=kind,
        reference=tuple(shares),
        categories=tuple(top),
        null_share=null_share,
        count=len(values),
    )


def default_profile_path(version_dir: Path) -> Path:
    """Where a version's profile lives."""
    return version_dir / PROFILE_FILE
