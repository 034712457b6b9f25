"""The :class:`Model` base class teams subclass: ``load()`` once, ``predict()`` per request."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Model", "SelfTestCase", "TensorSpec", "Tolerance"]


@dataclass(frozen=True)
class TensorSpec:
    """Name, Open Inference datatype and shape (-1 = any size) of one tensor."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Tolerance:
    """Numeric tolerance: ``|actual - expected| <= atol + rtol * |expected|``."""

    atol: float = 1e-8
    rtol: float = 1e-5


@dataclass(frozen=True)
class SelfTestCase:
    """One self-test: an input, the output expected for it, and the numeric tolerance."""

    name: str
    input: Any
    expected: Any
    tolerance: Tolerance = field(default_factory=Tolerance)


class Model(ABC):
    """Base class of every served model.

    Subclass it and implement :meth:`load` and :meth:`predict`; servinglib does the rest::

        class EtaModel(servinglib.Model):
            def load(self, path: Path) -> None:
                self.weights = json.loads((path / "weights.json").read_text())

            def predict(self, features: dict[str, Any]) -> dict[str, Any]:
                return {"eta_s": self.weights["base"] + 60 * features["distance_km"]}

    One instance is created per version per worker process, after gunicorn forks, and is
    called from several request threads at once: keep ``predict`` free of shared mutable state.

    Attributes:
        inputs: tensors the model accepts, reported by the Open Inference metadata endpoint.
        outputs: tensors the model returns.
    """

    inputs: Sequence[TensorSpec] = ()
    outputs: Sequence[TensorSpec] = ()

    @abstractmethod
    def load(self, path: Path) -> None:
        """Read the artifact of one version from its directory ``path``."""

    @abstractmethod
    def predict(self, features: Any) -> Any:
        """Answer one request; the result must be JSON-serialisable or tensor-like."""

    def predict_batch(self, batch: Sequence[Any]) -> list[Any]:
        """Answer several requests at once; override when the model vectorises well."""
        return [self.predict(features) for features in batch]

    def self_test_cases(self) -> Sequence[SelfTestCase]:
        """Extra self-tests declared in code, run after ``load`` with those of test_data.json."""
        return ()
