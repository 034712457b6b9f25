"""Import a user's Model class from ``package.module:Class`` or ``path/file.py:Class``."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from servinglib.errors import ModelLoadError
from servinglib.model import Model

__all__ = ["LazyExports", "import_file_as", "import_model_class", "import_object"]

_file_modules: dict[Path, ModuleType] = {}


def import_model_class(class_ref: str, root: Path, python_path: Sequence[Path] = ()) -> type[Model]:
    """Return the :class:`Model` subclass named by ``class_ref``.

    ``package.module:Class`` is imported with ``root`` and ``python_path`` on ``sys.path``;
    ``path/file.py:Class`` is loaded from that file, which must lie inside ``root``.

    Raises:
        ModelLoadError: the module or class is missing or is not a Model subclass.
    """
    cls = import_object(class_ref, root, python_path)
    if not (isinstance(cls, type) and issubclass(cls, Model)):
        raise ModelLoadError(
            f"{class_ref!r} is not a subclass of servinglib.Model; derive it from servinglib.Model"
        )
    return cls


def import_object(ref: str, root: Path, python_path: Sequence[Path] = ()) -> object:
    """Return the object named by ``module:name`` or ``path/file.py:name``.

    Raises:
        ModelLoadError: the module or attribute is missing.
    """
    module_ref, _, class_name = ref.partition(":")
    if module_ref.endswith(".py"):
        module = _import_file(module_ref, root)
    else:
        roots = (root, *python_path)
        for entry in reversed(roots):  # this service's roots first, in their order
            if str(entry) in sys.path:
                sys.path.remove(str(entry))
            sys.path.insert(0, str(entry))
        _forget_foreign_package(module_ref.split(".", 1)[0], roots)
        try:
            module = importlib.import_module(module_ref)
        except ImportError as e:
            raise ModelLoadError(
                f"cannot import module {module_ref!r} for {ref!r}: {e}; check the "
                f"reference and that the module is importable from {root}"
            ) from e
    found = getattr(module, class_name, None)
    if found is None:
        raise ModelLoadError(
            f"module {module_ref!r} has no attribute {class_name!r}; check the reference {ref!r}"
        )
    return found


def _forget_foreign_package(top: str, roots: Sequence[Path]) -> None:
    """Drop an imported package of the same name from another service (say two teams'
    ``models``), so this service's own is imported; modules already loaded stay usable."""
    module = sys.modules.get(top)
    ours = any((r / top).is_dir() or (r / f"{top}.py").is_file() for r in roots)
    if module is None or not ours:  # e.g. servinglib.runtimes: not this service's package
        return
    locations = [getattr(module, "__file__", None), *getattr(module, "__path__", [])]
    resolved = [r.resolve() for r in roots]
    if any(
        loc and any(Path(loc).resolve().is_relative_to(r) for r in resolved) for loc in locations
    ):
        return
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[name]


def _import_file(relative: str, root: Path) -> ModuleType:
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()):
        raise ModelLoadError(f"model file {relative!r} lies outside {root}; keep it inside")
    if not path.is_file():
        raise ModelLoadError(f"model file {relative!r} ({path}) does not exist")
    # A private, unique module name per file so two teams' `model.py` never collide.
    name = "servinglib_user_models." + re.sub(r"\W", "_", str(path.relative_to(root.resolve())))
    return import_file_as(path, name)


def import_file_as(path: Path, name: str) -> ModuleType:
    """Import the Python file ``path`` as module ``name`` (once; later calls reuse it).

    Raises:
        ModelLoadError: the file is missing or raised while importing.
    """
    path = path.resolve()
    if path in _file_modules:
        return _file_modules[path]
    if not path.is_file():
        raise ModelLoadError(f"Python file {path} does not exist")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelLoadError(f"cannot load model file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise ModelLoadError(f"importing {path} raised {type(e).__name__}: {e}") from e
    _file_modules[path] = module
    return module


class LazyExports:
    """A package's public names imported on first use (``__getattr__``/``__dir__``).

    Tools such as ``batch`` and ``optimize`` keep ``servinglib --help`` free of their heavy
    dependencies this way. ``missing`` turns a dependency that is not installed into an
    error naming the extra to install (or returns None to re-raise).

    Example::

        _lazy = LazyExports("servinglib.batch", {"predict": "servinglib.batch._job"})
        __getattr__, __dir__ = _lazy.getattr, _lazy.dir
    """

    def __init__(
        self,
        package: str,
        homes: dict[str, str],
        missing: Callable[[ModuleNotFoundError], Exception | None] | None = None,
    ) -> None:
        self._package = package
        self._homes = homes
        self._missing = missing

    def getattr(self, name: str) -> Any:
        """The exported ``name``, imported from its home module (cached in the package)."""
        home = self._homes.get(name)
        if home is None:
            raise AttributeError(f"module {self._package!r} has no attribute {name!r}")
        try:
            value = getattr(importlib.import_module(home), name)
        except ModuleNotFoundError as e:
            error = self._missing(e) if self._missing is not None else None
            if error is None:
                raise
            raise error from e
        setattr(sys.modules[self._package], name, value)
        return value

    def dir(self) -> list[str]:
        """The exported names."""
        return sorted(self._homes)
