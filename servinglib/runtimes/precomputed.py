"""``runtime: precomputed``: answer from a batch output, keyed by one feature.

A version directory holds the output of ``servinglib batch-predict`` (``runtime_options.file``,
default ``predictions``: a directory of parts, one ``.parquet`` file, or a ``.sqlite`` / ``.db``
file with a ``predictions`` table). A request's ``features[key]`` picks its row; the output
columns of that row are the answer. A miss (no row, or a row whose ``error`` is set) is
answered by the fallback: a version of another served model, called through that model's
own lane, so its input_schema, declared tensors, batching, deadline and metrics apply::

    - name: cancer-scores
      runtime: precomputed
      repository: models/breast_cancer
      versions: [nightly]                  # nightly/predictions/ is tonight's batch output
      default_version: nightly
      runtime_options:
        key: id
        fallback_version: "2"              # models/breast_cancer/2, as breast-cancer serves it

``fallback_model`` names the model when it is not the one serving the same repository.

Parquet outputs are read into memory at load (one dict from key to row); SQLite files are
queried per request. The lookup happens when the request is admitted: its result is the
``x-servinglib-precomputed: hit|miss`` response header, and it is counted in
``servinglib_precomputed_lookups_total`` (labels model, version, result = hit | miss) and
in :attr:`PrecomputedModel.hits` / :attr:`PrecomputedModel.misses`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servinglib.errors import InvalidInputError, ModelLoadError
from servinglib.model import (
    CALL_SCOPE,
    PRECOMPUTED_LOOKUP,
    Model,
    ModelCaller,
    StepCall,
    TensorSpec,
)
from servinglib.runtimes._lookup import LookupTable, request_key

__all__ = ["FALLBACK_STEP", "PrecomputedModel"]

FALLBACK_STEP = "fallback"  # the step name of fallback calls (servinglib_step_* metrics)


@dataclass(frozen=True, slots=True)
class _Looked:
    """A request looked up: the precomputed answer (hit), or the features the fallback gets."""

    hit: bool
    value: Any


class PrecomputedModel(Model):
    """Answers from a batch output; a miss goes to the fallback model's lane."""

    platform = "servinglib_precomputed"
    # Open Inference requests carry the key and, for the fallback, any other tensors: the
    # key is checked here and the rest by the fallback model's lane.
    checks_own_tensors = True

    hits: int = 0
    misses: int = 0

    def load(self, path: Path) -> None:
        """Read the batch output of ``path`` and check that the fallback is READY."""
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
        self._table = LookupTable(source, key)
        self._unwrap = self._table.outputs == ["output"]
        self.inputs = (TensorSpec(key, self._table.datatype, (1,)),)
        self._lock = threading.Lock()
        self._fallback: tuple[str, str | None] | None = None
        self._caller: ModelCaller | None = self.settings.caller
        model = options.get("fallback_model")
        if model is not None:
            version = options.get("fallback_version")
            self._fallback = (str(model), None if version is None else str(version))
            if self._caller is None:
                raise ModelLoadError(
                    f"model {self.settings.name!r}: the fallback model {model!r} is called "
                    "through the service; load this version with servinglib serve or selftest"
                )
            self._caller.check_ready(*self._fallback, FALLBACK_STEP)
        self._counter = _lookup_counter()

    def prepare(self, features: Any) -> _Looked:
        """Look the request's key up, when the request is admitted.

        Raises:
            InvalidInputError: no key, a key no row could hold, or a miss the fallback
                cannot answer (none configured, or nothing but the key sent).
        """
        if type(features) is _Looked:
            return features
        if not isinstance(features, Mapping) or self._key not in features:
            raise InvalidInputError(
                f"features must hold {self._key!r}, the key of the precomputed predictions",
                field=self._key,
            )
        key = request_key(features[self._key], self._key, self._table.kind)
        found = self._table.get(key)
        hit = found is not None
        PRECOMPUTED_LOOKUP.set("hit" if hit else "miss")
        self._count(hit)
        if found is not None:
            return _Looked(True, found["output"] if self._unwrap else found)
        rest = {name: value for name, value in features.items() if name != self._key}
        where = f"no precomputed prediction for {self._key}={key!r} in version "
        where += repr(self.settings.version)
        if self._fallback is None:
            raise InvalidInputError(
                f"{where}, and no fallback_version is configured", field=self._key
            )
        if not rest:
            raise InvalidInputError(
                f"{where}; the request holds only the key, so fallback model "
                f"{self._fallback[0]!r} has nothing to answer from: send the features too",
                field=self._key,
            )
        return _Looked(False, rest)

    def predict(self, features: Any) -> Any:
        """The precomputed answer for ``features[key]``, or the fallback's on a miss."""
        return self.predict_batch([features])[0]

    def predict_batch(self, batch: Sequence[Any]) -> list[Any]:
        """Hits as they were looked up; misses through the fallback's lane, at once."""
        looked = [self.prepare(features) for features in batch]
        answers = [item.value if item.hit else None for item in looked]
        missed = [i for i, item in enumerate(looked) if not item.hit]
        if not missed:
            return answers
        assert self._caller is not None  # prepare refused misses without a fallback
        assert self._fallback is not None
        caller, (model, version) = self._caller, self._fallback
        scope = CALL_SCOPE.get()
        owner = (self.settings.name, self.settings.version, FALLBACK_STEP)

        def call(index: int) -> Any:
            return caller.call(StepCall(model, version, looked[index].value, owner, scope))

        futures = [caller.submit(lambda i=i: call(i)) for i in missed[1:]]  # type: ignore[misc]
        answers[missed[0]] = call(missed[0])
        for index, future in zip(missed[1:], futures, strict=True):
            answers[index] = future.result()
        return answers

    def _count(self, hit: bool) -> None:
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1
        self._counter.labels(
            self.settings.name, self.settings.version, "hit" if hit else "miss"
        ).inc()


def _lookup_counter() -> Any:
    """The lookup counter; under gunicorn it lands in the shared multiprocess directory."""
    from prometheus_client import CollectorRegistry, Counter

    return Counter(
        "servinglib_precomputed_lookups",
        "Requests a precomputed version looked up, by result (hit: answered from the batch "
        "output, miss: answered by the fallback model or refused).",
        ["model", "version", "result"],
        registry=CollectorRegistry(),
    )
