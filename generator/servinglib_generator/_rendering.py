"""Find the shipped cookiecutter templates and render one, as a library call (no shell).

Templates live in ``templates/`` of the source tree and ship inside the wheel as
``servinglib_generator/templates``. Their Python files end in ``.py.jinja`` so that type
checkers and linters never read unrendered Jinja; rendering drops the suffix.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path

from servinglib_generator.errors import GeneratorError

__all__ = ["TEMPLATE_SUFFIX", "render_template", "template_dir"]

TEMPLATE_SUFFIX = ".jinja"


def template_dir(name: str) -> Path:
    """Directory of the cookiecutter template ``name`` (``service`` or ``model``)."""
    candidates = [
        Path(__file__).resolve().parent / "templates" / name,  # in the wheel
        Path(__file__).resolve().parents[2] / "templates" / name,  # a checkout without symlinks
    ]
    for candidate in candidates:
        if (candidate / "cookiecutter.json").is_file():
            return candidate
    raise GeneratorError(
        f"template {name!r} not found (looked in {', '.join(map(str, candidates))}); "
        "reinstall servinglib, whose wheel ships the templates"
    )


def render_template(name: str, context: Mapping[str, str], output_dir: Path) -> Path:
    """Render template ``name`` with ``context`` into ``output_dir``; return the new directory.

    Raises:
        GeneratorError: the template failed to render (a bug in the template).
    """
    from cookiecutter.exceptions import CookiecutterException  # type: ignore[import-untyped]
    from cookiecutter.main import cookiecutter  # type: ignore[import-untyped]

    # Keep cookiecutter's replay files and caches out of the user's home directory.
    with tempfile.TemporaryDirectory(prefix="servinglib-generate-") as home:
        config = Path(home) / "cookiecutter.yaml"
        config.write_text(
            json.dumps({"cookiecutters_dir": f"{home}/cache", "replay_dir": f"{home}/replay"}),
            encoding="utf-8",
        )
        try:
            result = cookiecutter(
                str(template_dir(name)),
                no_input=True,
                extra_context=dict(context),
                output_dir=str(output_dir),
                config_file=str(config),
                overwrite_if_exists=True,
                accept_hooks=False,
            )
        except CookiecutterException as e:
            raise GeneratorError(f"rendering template {name!r} failed: {e}") from e
    project = Path(result)
    for path in sorted(project.rglob(f"*{TEMPLATE_SUFFIX}")):
        path.rename(path.with_name(path.name.removesuffix(TEMPLATE_SUFFIX)))
    return project
