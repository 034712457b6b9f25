"""The :class:`Model` base class teams subclass: ``load()`` once, ``predict()`` per request."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from servinglib.errors import InvalidInputError
from servinglib.model_metrics import NO_METRICS, ModelMetrics

__all__ = [
    "CALL_SCOPE",
    "PRECOMPUTED_LOOKUP",
    "CallScope",
    "LoopModel",
    "Model",
    "ModelCaller",
    "ModelSettings",
    "SelfTestCase",
    "StepCall",
    "TensorSpec",
    "Tolerance",
]


@dataclass(frozen=True)
class TensorSpec:
    """Name, Open Inference datatype and shape (-1 = any size) of one tensor."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def accepts(self, shape: Sequence[int]) -> bool:
        """True when ``shape`` fits this spec (same rank; -1 matches any size)."""
        if len(shape) != len(self.shape):
            return False
        for want, got in zip(self.shape, shape, strict=True):  # noqa: SIM110 (no generator per call)
            if want not in (got, -1):
                return False
        return True

    def check(self, model: str, shape: Sequence[int]) -> None:
        """Refuse a tensor of ``shape`` given as this input of ``model``.

        Raises:
            InvalidInputError: naming the input, the shape given and the shape expected.
        """
        if not self.accepts(shape):
            raise InvalidInputError(
                f"input {self.name!r} of model {model!r} has shape {list(shape)}; expected "
                f"{list(self.shape)} (-1 = any size)",
                field=self.name,
            )


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


@dataclass(frozen=True, slots=True)
class CallScope:
    """The request a model that calls other models is answering: what its calls inherit.

    One channel carries it to the steps: the service builds it at admission, a composed
    model's lane sets :data:`CALL_SCOPE` around ``predict()`` (or passes it to
    ``predict_async``), and every step request takes its deadline, request id (with the
    step's name appended), priority and routing key from it. ``followups`` is the parent's
    deferred work: a step's shadow copies join it, so they start only once the client has
    the parent's answer. ``trace``: the parent's OpenTelemetry context (None when tracing
    is off), under which each step's span goes (see :mod:`servinglib.serving.tracing`).
    """

    deadline: float | None = None
    request_id: str = ""
    priority: int | None = None
    routing_key: str | None = None
    followups: list[Callable[[], None]] | None = None
    trace: Any = None


# The scope of the request being answered on this thread (None outside a model call).
CALL_SCOPE: ContextVar[CallScope | None] = ContextVar("servinglib_call_scope", default=None)

# How a ``runtime: precomputed`` version answered the request being admitted in this context
# (``hit`` or ``miss``), set when it looks the key up; the HTTP layer resets it for each
# request and sends it as the ``x-servinglib-precomputed`` header.
PRECOMPUTED_LOOKUP: ContextVar[str | None] = ContextVar("servinglib_precomputed", default=None)


@dataclass(frozen=True, slots=True)
class StepCall:
    """One call a model makes to another configured model (a composed model's step).

    ``version`` None lets the member's traffic split or default decide; ``owner`` is the
    calling (model, version, step); ``parent`` the request being answered (None outside
    one: its deadline, request id, priority and routing key pass to the step).
    """

    model: str
    version: str | None
    inputs: Any
    owner: tuple[str, str, str]
    parent: CallScope | None = None


class ModelCaller(Protocol):
    """Calls another configured model through its own lane (what composed models run on)."""

    def call(self, step: StepCall) -> Any:
        """Answer ``step.inputs`` with ``step.model`` within its parent's deadline."""

    async def call_async(self, step: StepCall) -> Any:
        """:meth:`call` for an event loop."""

    def check_ready(self, model: str, version: str | None, step: str) -> None:
        """Raise ModelLoadError naming ``step`` unless ``model`` (``version``) is READY."""

    def submit(self, work: Callable[[], Any]) -> Future[Any]:
        """Run ``work`` beside the calling thread (steps that do not wait for each other)."""

    def import_object(self, ref: str) -> object:
        """Import ``module:name`` from the service's python_path (custom combiners)."""


@dataclass(frozen=True)
class ModelSettings:
    """What servinglib tells a model instance before ``load()``.

    Attributes:
        name: the model name from servinglib.yaml.
        version: the version being loaded.
        workers: gunicorn worker processes sharing this machine's cores.
        runtime_options: ``runtime_options`` from servinglib.yaml.
        inputs: tensor inputs declared in servinglib.yaml.
        outputs: tensor outputs declared in servinglib.yaml.
        caller: calls other models (set for every model; composed models use it).
        composition: the ``pipeline:``/``ensemble:`` spec of a composed model.
        metrics: creates the version's own metrics (:attr:`Model.metrics`); None outside
            the server.
    """

    name: str
    version: str
    workers: int = 1
    runtime_options: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    caller: ModelCaller | None = None
    composition: Any = None
    metrics: ModelMetrics | None = None


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
    settings: ModelSettings = ModelSettings(name="unnamed", version="0")

    @property
    def metrics(self) -> ModelMetrics:
        """This version's own metrics: ``self.metrics.counter(name, help)``, ``gauge``,
        ``histogram``, created in :meth:`load`, labelled with model and version, summed over
        the server's workers on ``/metrics`` (see :mod:`servinglib.model_metrics`)."""
        return self.settings.metrics or NO_METRICS

    def configure(self, settings: ModelSettings) -> None:
        """Receive settings before :meth:`load`; declared tensors become metadata."""
        self.settings = settings
        if settings.inputs:
            self.inputs = settings.inputs
        if settings.outputs:
            self.outputs = settings.outputs

    @abstractmethod
    def load(self, path: Path) -> None:
        """Read the artifact of one version from its directory ``path``."""

    @abstractmethod
    def predict(self, features: Any) -> Any:
        """Answer one request; the result must be JSON-serialisable or tensor-like."""

    def prepare(self, features: Any) -> Any:
        """Check and convert one request before it is queued or batched (decode once).

        Raise :class:`~servinglib.errors.InvalidInputError` to reject the request with 400;
        what this returns is what ``predict`` and ``predict_batch`` receive. The default
        passes ``features`` through unchanged.
        """
        return features

    def prepare_batch(self, batch: Sequence[Any]) -> list[Any]:
        """Prepare many requests at once: what :meth:`prepare` returns for each, in order.

        Batch prediction calls this on thousands of rows at a time; override it when
        converting them together is cheaper than one by one (the tensor runtimes stack
        them into one array). Raise when any request is invalid: each is then prepared
        alone with :meth:`prepare`, so a bad one fails with its own message.
        """
        return [self.prepare(features) for features in batch]

    def predict_batch(self, batch: Sequence[Any]) -> list[Any]:
        """Answer several requests at once; override when the model vectorises well."""
        return [self.predict(features) for features in batch]

    def self_test_cases(self) -> Sequence[SelfTestCase]:
        """Extra self-tests declared in code, run after ``load`` with those of test_data.json."""
        return ()


class LoopModel(Model):
    """A model that answers on the worker's event loop instead of an executor thread.

    The asyncio worker awaits :meth:`predict_async` (composed models await their steps
    this way); the gthread worker and batch prediction call :meth:`predict`.
    """

    @abstractmethod
    async def predict_async(self, features: Any, scope: CallScope | None) -> Any:
        """Answer one request within ``scope`` (its deadline, request id, priority)."""
