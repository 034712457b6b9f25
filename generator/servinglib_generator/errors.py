"""One exception tree for the generator; the CLI catches :class:`GeneratorError` once.

::

    GeneratorError                 anything the generator refuses or cannot do
     ├── SpecError                 answers (key=value or prompts) that break the rules
     ├── TargetExistsError         rendering would overwrite files that already exist
     ├── ArtifactError             the starter artifact cannot be built (missing onnx/torch)
     └── RepositoryError           add-model: the repository is not a usable generated repo
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ArtifactError",
    "GeneratorError",
    "RepositoryError",
    "SpecError",
    "TargetExistsError",
]


class GeneratorError(Exception):
    """Base of every error the generator raises on purpose."""


class SpecError(GeneratorError):
    """One or more answers are invalid; ``problems`` lists each, naming key, value and fix."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        if len(self.problems) == 1:
            message = self.problems[0]
        else:
            message = f"{len(self.problems)} problems:\n  " + "\n  ".join(self.problems)
        super().__init__(message)


class TargetExistsError(GeneratorError):
    """The output directory or a file to create already exists."""


class ArtifactError(GeneratorError):
    """The starter artifact of a model version cannot be built."""


class RepositoryError(GeneratorError):
    """The repository given to add-model cannot be updated safely."""
