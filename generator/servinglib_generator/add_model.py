"""Add a model to a generated repository without clobbering what the team changed.

New files (``models/<model>/``, ``tests/test_model_<model>.py``) are only ever created, never
overwritten. Existing files get the smallest edit that adds the model, checked by parsing:

- ``servinglib.yaml``: the entry is appended to ``models:``, comments and keys kept;
- ``terraform/models.auto.tfvars.json``: the name is appended to ``models``;
- ``.github/workflows/ci.yml``: the name is appended to the ``models`` job's matrix;
- ``k8s/deployment.yaml``: the name is appended to the ``servinglib.dev/models`` annotation;
- ``requirements.txt``: the runtime's packages are added when missing.

An edit that cannot be made safely is reported as a manual step instead. Example::

    add_model(Path("eta-service"), ModelSpec("eta-v2", runtime="onnx"))
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from servinglib_generator import _edits
from servinglib_generator._checks import check_rendered_files
from servinglib_generator._rendering import render_template
from servinglib_generator.artifacts import build_artifact
from servinglib_generator.errors import GeneratorError, RepositoryError, TargetExistsError
from servinglib_generator.runtimes import (
    RUNTIME_REQUIREMENTS,
    TORCH_INDEX_URL,
    TORCH_REQUIREMENT,
)
from servinglib_generator.spec import ModelSpec

__all__ = ["ModelAdded", "add_model", "install_model", "model_context"]

CONFIG = Path("servinglib.yaml")
TFVARS = Path("terraform/models.auto.tfvars.json")
WORKFLOW = Path(".github/workflows/ci.yml")
DEPLOYMENT = Path("k8s/deployment.yaml")
REQUIREMENTS = Path("requirements.txt")
DOCKERFILE = Path("Dockerfile")
MODELS_ANNOTATION = "servinglib.dev/models"
FRAGMENT_DIR = ".generator"
# Files of the model template that only the python runtime keeps.
PYTHON_ONLY = ("model.py", "1/weights.json")


@dataclass(frozen=True)
class ModelAdded:
    """What adding a model did.

    Attributes:
        created: new files, relative to the repository.
        updated: existing files edited.
        manual_steps: edits that could not be made safely; the user must make them.
        comments_kept: False when servinglib.yaml had to be rewritten from its data.
    """

    model: ModelSpec
    created: tuple[Path, ...] = ()
    updated: tuple[Path, ...] = ()
    manual_steps: tuple[str, ...] = ()
    comments_kept: bool = True


@dataclass
class _Plan:
    edits: dict[Path, str] = field(default_factory=dict)
    manual: list[str] = field(default_factory=list)
    comments_kept: bool = True


def model_context(service: str, model: ModelSpec) -> dict[str, str]:
    """The cookiecutter context of the model template."""
    return {
        "service": service,
        "model": model.name,
        "model_ident": model.ident,
        "model_class": model.class_name,
        "runtime": model.runtime,
    }


def add_model(repo: Path, model: ModelSpec) -> ModelAdded:
    """Add ``model`` to the generated repository ``repo``.

    Raises:
        RepositoryError: ``repo`` has no valid servinglib.yaml, or already has the model.
        TargetExistsError: a file the model needs already exists.
        ArtifactError: the starter artifact cannot be built.
    """
    from servinglib.config.spec import load_config
    from servinglib.errors import ConfigError

    repo = repo.resolve()
    if not (repo / CONFIG).is_file():
        raise RepositoryError(
            f"{repo} has no {CONFIG}: run add-model inside a repository made by "
            "servinglib-generate, or pass --repo PATH to point at one"
        )
    try:
        config = load_config(repo / CONFIG, environ={})
    except ConfigError as e:
        raise RepositoryError(
            f"{repo} is not a servinglib repository add-model can update: {e}; run add-model "
            "in a generated repository (or pass --repo) once its servinglib.yaml is valid"
        ) from e
    if any(m.name == model.name for m in config.models):
        raise RepositoryError(
            f"{repo / CONFIG} already has a model {model.name!r}; pick another name, or add a "
            f"version directory to models/{model.name}/ instead"
        )
    return install_model(repo, config.service, model, strict=False)


def install_model(repo: Path, service: str, model: ModelSpec, *, strict: bool) -> ModelAdded:
    """Render the model's files into ``repo`` and register it in the repository's files.

    With ``strict`` (a freshly rendered repository), an edit that cannot be made is a bug
    and raises; otherwise it becomes a manual step. Nothing is written unless everything
    could be prepared; a repository left invalid is restored.
    """
    with tempfile.TemporaryDirectory(prefix="servinglib-generate-model-") as tmp:
        rendered = render_template("model", model_context(service, model), Path(tmp))
        entry = (rendered / FRAGMENT_DIR / "servinglib-entry.yaml").read_text(encoding="utf-8")
        shutil.rmtree(rendered / FRAGMENT_DIR)
        model_dir = rendered / "models" / model.name
        if model.runtime != "python":
            for name in PYTHON_ONLY:
                (model_dir / name).unlink()
        build_artifact(model.runtime, model_dir / "1")
        files = sorted(p.relative_to(rendered) for p in rendered.rglob("*") if p.is_file())
        clashes = [f for f in files if (repo / f).exists()]
        if (repo / "models" / model.name).exists():
            clashes.insert(0, Path("models") / model.name)
        if clashes:
            raise TargetExistsError(
                f"model {model.name!r} would overwrite {', '.join(map(str, clashes))} in {repo}; "
                "move them away or choose another model name"
            )
        plan = _plan_edits(repo, model, entry, strict)
        originals = {path: (repo / path).read_text(encoding="utf-8") for path in plan.edits}
        try:
            for relative in files:
                (repo / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(rendered / relative, repo / relative)
            for relative, text in plan.edits.items():
                (repo / relative).write_text(text, encoding="utf-8")
            check_rendered_files(repo, [*files, *plan.edits])
        except BaseException:
            shutil.rmtree(repo / "models" / model.name, ignore_errors=True)
            for relative in files:
                (repo / relative).unlink(missing_ok=True)
            for relative, text in originals.items():
                (repo / relative).write_text(text, encoding="utf-8")
            raise
    return ModelAdded(
        model=model,
        created=tuple(files),
        updated=tuple(plan.edits),
        manual_steps=tuple(plan.manual),
        comments_kept=plan.comments_kept,
    )


def _plan_edits(repo: Path, model: ModelSpec, entry: str, strict: bool) -> _Plan:
    plan = _Plan()
    try:
        config, plan.comments_kept = _edits.append_model_entry(
            (repo / CONFIG).read_text(encoding="utf-8"), entry
        )
    except ValueError as e:
        raise RepositoryError(f"cannot add a model to {repo / CONFIG}: {e}") from e
    plan.edits[CONFIG] = config

    def edit(path: Path, change: Callable[[str], str | None], manual: str) -> None:
        text = (repo / path).read_text(encoding="utf-8") if (repo / path).is_file() else None
        new = change(text) if text is not None else None
        if new is None:
            if strict:
                raise GeneratorError(f"cannot update the freshly rendered {path}; template bug")
            plan.manual.append(f"{path}: {manual}")
        elif new != text:
            plan.edits[path] = new

    name = model.name
    edit(
        TFVARS,
        lambda text: _edits.append_to_json_list(text, "models", name),
        f'add "{name}" to the `models` list (Terraform variable var.models)',
    )
    edit(
        WORKFLOW,
        lambda text: _edits.append_to_flow_list(
            text, ("jobs", "models", "strategy", "matrix", "model"), model.ident
        ),
        f"add {model.ident} to jobs.models.strategy.matrix.model so its tests run in CI",
    )
    edit(
        DEPLOYMENT,
        lambda text: _edits.append_to_csv_annotation(text, MODELS_ANNOTATION, name),
        f"add {name} to the {MODELS_ANNOTATION} annotation of the Deployment",
    )
    requirements = RUNTIME_REQUIREMENTS[model.runtime]
    edit(
        REQUIREMENTS,
        lambda text: _edits.ensure_requirements(text, requirements),
        "install " + (", ".join(line for _, line in requirements) or "nothing more"),
    )
    if model.runtime == "torch":  # the first torch model of a repository needs PyTorch's index
        for path, line in (
            (DOCKERFILE, f"ENV PIP_EXTRA_INDEX_URL={TORCH_INDEX_URL}"),
            (WORKFLOW, f"PIP_EXTRA_INDEX_URL: {TORCH_INDEX_URL} (under env:)"),
        ):
            text = (repo / path).read_text(encoding="utf-8") if (repo / path).is_file() else ""
            if "PIP_EXTRA_INDEX_URL" not in text:
                plan.manual.append(
                    f"{path}: add {line}, so pip finds the CPU build of {TORCH_REQUIREMENT}"
                )
    return plan
