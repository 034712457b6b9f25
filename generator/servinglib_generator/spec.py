"""What to generate: a validated :class:`ServiceSpec` (or :class:`ModelSpec` for add-model).

Build one from ``key=value`` answers; every answer is checked before anything is rendered::

    >>> spec = build_service_spec({"team": "eta", "model": "eta"})
    >>> spec.service, spec.model.runtime
    ('eta-service', 'python')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from servinglib_generator.prompts import (
    MODEL_PROMPTS,
    SERVICE_PROMPTS,
    AskFunction,
    resolve_answers,
)
from servinglib_generator.runtimes import Runtime
from servinglib_generator.source import ServinglibSource

__all__ = [
    "ModelSpec",
    "PredictionSinks",
    "Resources",
    "Scaling",
    "ServiceSpec",
    "build_model_spec",
    "build_service_spec",
]


@dataclass(frozen=True)
class ModelSpec:
    """One model: its name (a DNS label) and how it is served."""

    name: str
    runtime: Runtime = "python"

    @property
    def ident(self) -> str:
        """The name as a Python identifier, for test file names: ``fraud-v2`` → ``fraud_v2``."""
        return self.name.replace("-", "_")

    @property
    def class_name(self) -> str:
        """The Model subclass of a python-runtime model: ``fraud-v2`` → ``FraudV2Model``."""
        return "".join(part.capitalize() for part in self.name.split("-")) + "Model"


@dataclass(frozen=True)
class Resources:
    """Kubernetes requests and limits of the app container."""

    cpu_request: str = "1"
    cpu_limit: str = "2"
    memory_request: str = "1Gi"
    memory_limit: str = "2Gi"


@dataclass(frozen=True)
class Scaling:
    """Initial replicas and HorizontalPodAutoscaler bounds."""

    replicas: int = 2
    min_replicas: int = 2
    max_replicas: int = 10
    target_cpu_utilization: int = 70


@dataclass(frozen=True)
class PredictionSinks:
    """Where the prediction log streams: ``kinds`` (``kafka``, ``parquet``) and their settings."""

    kinds: tuple[str, ...] = ()
    kafka_bootstrap_servers: str = "kafka:9092"
    kafka_topic: str = ""
    lake_url: str = ""


@dataclass(frozen=True)
class ServiceSpec:
    """Everything needed to render a team's service repository."""

    team: str
    service: str
    model: ModelSpec
    owners: tuple[str, ...]
    servinglib: ServinglibSource
    workers: int = 2
    resources: Resources = Resources()
    scaling: Scaling = Scaling()
    image: str = ""
    python_version: str = "3.11"
    sinks: PredictionSinks = PredictionSinks()


def build_service_spec(answers: Mapping[str, str], ask: AskFunction | None = None) -> ServiceSpec:
    """Validate ``answers`` (asking for missing ones with ``ask``) and build the spec.

    Raises:
        SpecError: listing every invalid, unknown or missing answer.
    """
    values = resolve_answers(SERVICE_PROMPTS, answers, ask)
    return ServiceSpec(
        team=values["team"],
        service=values["service"],
        model=ModelSpec(values["model"], values["runtime"]),
        owners=values["owners"],
        servinglib=values["servinglib"],
        workers=values["workers"],
        resources=Resources(
            cpu_request=values["cpu_request"],
            cpu_limit=values["cpu_limit"],
            memory_request=values["memory_request"],
            memory_limit=values["memory_limit"],
        ),
        scaling=Scaling(
            replicas=values["replicas"],
            min_replicas=values["min_replicas"],
            max_replicas=values["max_replicas"],
            target_cpu_utilization=values["target_cpu_utilization"],
        ),
        image=values["image"],
        python_version=values["python_version"],
        sinks=PredictionSinks(
            kinds=values["prediction_sinks"],
            kafka_bootstrap_servers=values["kafka_bootstrap_servers"],
            kafka_topic=values["kafka_topic"],
            lake_url=values["lake_url"],
        ),
    )


def build_model_spec(answers: Mapping[str, str], ask: AskFunction | None = None) -> ModelSpec:
    """Validate the answers of ``add-model`` (``model``, ``runtime``).

    Raises:
        SpecError: listing every invalid, unknown or missing answer.
    """
    values = resolve_answers(MODEL_PROMPTS, answers, ask)
    return ModelSpec(values["model"], values["runtime"])
