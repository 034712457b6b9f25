"""servinglib-generate: a team's model-serving repository that works the moment it exists.

Validate the answers first, then render (the ``servinglib-generate`` command does the same)::

    from pathlib import Path
    from servinglib_generator import build_service_spec, generate_service

    spec = build_service_spec({"team": "eta", "model": "eta", "runtime": "onnx"})
    repo = generate_service(spec, Path("."))   # ./eta-service, its tests already passing
"""

from servinglib_generator.add_model import ModelAdded, add_model
from servinglib_generator.errors import (
    ArtifactError,
    GeneratorError,
    RepositoryError,
    SpecError,
    TargetExistsError,
)
from servinglib_generator.generate import generate_service
from servinglib_generator.spec import (
    ModelSpec,
    Resources,
    Scaling,
    ServiceSpec,
    build_model_spec,
    build_service_spec,
)

__all__ = [
    "ArtifactError",
    "GeneratorError",
    "ModelAdded",
    "ModelSpec",
    "RepositoryError",
    "Resources",
    "Scaling",
    "ServiceSpec",
    "SpecError",
    "TargetExistsError",
    "add_model",
    "build_model_spec",
    "build_service_spec",
    "generate_service",
]
