"""The public API: ``__all__`` complete, sorted, and every name importable."""

from __future__ import annotations

import importlib
import inspect

import pytest

import servinglib

MODULES = [
    "servinglib",
    "servinglib.errors",
    "servinglib.model",
    "servinglib.config.spec",
    "servinglib.lifecycle.selftest",
    "servinglib.lifecycle.registry",
    "servinglib.serving.service",
]


def _isort_style(name: str) -> tuple[int, str]:
    """Constants, then classes, then functions: the order ruff's RUF022 keeps."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_and_importable(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__all__ == sorted(module.__all__, key=_isort_style)
    for attr in module.__all__:
        assert hasattr(module, attr), f"{name}.{attr}"


def test_every_error_is_exported_from_the_package() -> None:
    errors = importlib.import_module("servinglib.errors")
    classes = {
        n
        for n, obj in vars(errors).items()
        if inspect.isclass(obj) and issubclass(obj, Exception) and not n.startswith("_")
    }
    assert classes <= set(servinglib.__all__)
    assert all(issubclass(getattr(servinglib, n), servinglib.ServinglibError) for n in classes)


def test_model_requires_load_and_predict() -> None:
    class Incomplete(servinglib.Model):
        def load(self, path: object) -> None:
            pass

    with pytest.raises(TypeError, match="predict"):
        Incomplete()  # type: ignore[abstract]
